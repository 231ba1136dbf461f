"""The coordinator log read back at start: the highest epoch in it, the newest offsets, the
transactions it leaves open (a begin or serialized record and no end), each with its
decision if one was logged, the outcomes of those ended, and SERIALIZE's totals. A
truncated log replays to the same, since truncation keeps every open transaction's records
and the newest totals record on (`Coordinator.truncation_point`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from txstream.oltp.messages import CoordinatorLog
from txstream_coordinator.serialize import Totals


@dataclass
class Replayed:
    epoch: int = 0  # the highest in the log
    last_offset: int | None = None  # of the newest record
    totals_offset: int | None = None  # of the newest totals record
    begun: dict[str, CoordinatorLog] = field(default_factory=dict)  # open: begin or serialized
    first: dict[str, int] = field(default_factory=dict)  # each open one's first offset
    decided: dict[str, CoordinatorLog] = field(default_factory=dict)  # decision or serialized


def replay(
    records: Iterable[tuple[int, CoordinatorLog]],
    totals: Totals,
    remember: Callable[[str, bool], None],
) -> Replayed:
    """Read the log, (offset, record) in order, into `totals` and, for each ended
    transaction in the order ended, `remember(txn_id, commit)`."""
    out = Replayed()
    for offset, r in records:
        out.last_offset = offset
        out.epoch = max(out.epoch, r.epoch)
        if r.kind in ("begin", "serialized"):
            out.begun[r.txn_id] = r
            out.first[r.txn_id] = offset
        if r.kind in ("decision", "serialized"):
            out.decided[r.txn_id] = r
        if r.kind == "serialized" and r.commit:
            totals.add(json.loads(r.results))
        elif r.kind == "totals":
            totals.load(r.results)
            out.totals_offset = offset
        elif r.kind == "end":
            out.begun.pop(r.txn_id, None)
            d = out.decided.pop(r.txn_id, None)
            remember(r.txn_id, d.commit if d is not None else r.commit)
    return out
