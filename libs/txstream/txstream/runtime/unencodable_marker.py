"""Checked records after a group commit met a state write it could not encode.

Such a write (a row that does not match its table's schema, a window state over the record
size limit) is found by the group commit, after its TE has merged into the group: the
commit fails before its transaction begins and the process exits, as on any commit failure.
Unchecked, the restarted engine would meet the same write again: a crash loop. So the
failure leaves a marker beside the engine's state, naming the input positions reached; the
next engine of the partition checks every TE's records (`RecordLimit.checked`: each state
write encoded as the TE ends, so that TE aborts with a dead letter instead) until it has committed
past them, and then drops the marker. The hot path pays nothing until a write fails.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from txstream.commit.record_limit import RecordLimit

log = logging.getLogger(__name__)


class UnencodableMarker:
    def __init__(self, marker: Path, record_check: RecordLimit) -> None:
        self.marker = marker
        self.record_check = record_check
        self.until: dict[str, int] | None = None

    def load(self) -> None:
        """RecordCheck checked if the last engine of this partition left a marker."""
        try:
            until = json.loads(self.marker.read_text())
        except FileNotFoundError:
            return
        except ValueError:
            until = {}  # a torn marker: check until the next commit
        self.until = {str(t): int(o) for t, o in dict(until).items()}
        self.record_check.checked = True
        log.warning("checking each TE's records until input positions %s are committed", self.until)

    def failed(self, positions: Mapping[str, int]) -> None:
        """A commit met an unencodable write with the inputs read up to `positions`."""
        tmp = self.marker.with_name(self.marker.name + ".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(dict(positions)))
        os.replace(tmp, self.marker)

    def committed(self, positions: Mapping[str, int]) -> None:
        """A group committed, leaving the inputs at `positions`: past the marker, the
        engine checks records at the commit again."""
        if self.until is None:
            return
        if all(positions.get(topic, 0) >= offset for topic, offset in self.until.items()):
            self.until = None
            self.record_check.checked = False
            self.marker.unlink(missing_ok=True)
            log.info("past the unencodable write: records checked at the commit again")
