"""What a group commit marks on the changelog for readers outside the engine.

A Kafka transaction's records carry nothing that says where it ends, and a reader that must
take whole commits (the warehouse's consistent cut, `txstream_etl.cut`) cannot see the
transaction markers. So the last changelog record of every group commit carries a header:
the records of one partition from after one marked record through the next are exactly one
engine commit. One individually produced record per commit, not per write.
"""

from __future__ import annotations

COMMIT_END_HEADER = "txstream.commit-end"
COMMIT_END = [(COMMIT_END_HEADER, b"")]
