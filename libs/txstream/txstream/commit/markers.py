"""What a group commit marks on the changelog for readers outside the engine.

A Kafka transaction's records carry nothing that says where it ends, and a reader that must
take whole commits (the warehouse's consistent cut, `txstream_etl.cut`) cannot see the
transaction markers. So the last changelog record of every group commit carries a header:
the records of one partition from after one marked record through the next are exactly one
engine commit. Its value lists the spanning batches whose part on this engine the commit
holds, each with every engine that runs a part, as JSON `[[stream, batch_id, [engine,
...]], ...]`: a reader takes a batch's parts on all of them or on none. One individually
produced record per commit, not per write.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from txstream.engine.group import SpanPart

COMMIT_END_HEADER = "txstream.commit-end"


def commit_end(spans: Sequence[SpanPart]) -> list[tuple[str, bytes]]:
    """The headers of a commit's last changelog record."""
    value = [[s.stream, s.batch_id, list(s.participants)] for s in spans]
    return [(COMMIT_END_HEADER, json.dumps(value, separators=(",", ":")).encode())]


def spans_of(value: bytes | str | None) -> list[SpanPart]:
    """The spanning batch parts a commit-end header names (none for an empty one)."""
    if not value:
        return []
    return [SpanPart(str(s), int(b), tuple(int(p) for p in ps)) for s, b, ps in json.loads(value)]
