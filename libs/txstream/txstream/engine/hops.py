"""Repartitioned edges: a procedure's input, sent to the engines owning each tuple's new key.

A procedure declared with `partition_by` does not run where its input is made. When the
producing TE ends, its output batch is split by the new key's owner (the library's one
routing function), and each part becomes an output of that TE for the procedure's own
topic, partition q, keyed by the sending engine. It commits with the TE's group, in the
same Kafka transaction as its state and input positions, so it is sent exactly once. The
engine owning partition q reads the topic read_committed and runs the procedure on each part
as one TE, committing the topic position with its effects: exactly once across the hop.

Each sender's parts reach an engine in that sender's batch order. By default parts from
different senders run as they arrive (commit order), each as one TE. An `ordered` edge
runs batch by batch in batch-id order instead, one TE per batch over its parts in sender
order, as one serial execution of the whole input would: each sender also writes a
progress marker (a part with no tuples) to every partition with each group that moves it
past a batch, and a batch runs once every sender has passed it (`HopInbox`). One TE per
batch also means a chain of ordered hops carries one part per batch and engine.
A sender knows it has passed batch b when its own input has: a border batch above b, or a
progress mark (a `PROGRESS` envelope) from the producer, which says every batch up to b has
been sent to that partition; for a chain of hops, when its own ordered inbox has run
everything up to b.

A tuple whose new key cannot be had (no such field, the function raised, a value that is
no key) aborts the producing TE, naming the procedure, tuple and reason: sending it
anywhere would put its effects on an engine that does not own them.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from txstream.engine.group import OutputBatch, SysKey
from txstream.engine.spanning import Owner
from txstream.model.declarations import Key, Procedure, Record
from txstream.model.errors import TxnAbort, exception_detail

# The envelope stream name of a progress mark on a border topic: every batch up to its id
# has been sent to this partition.
PROGRESS = "__progress__"
# System values an ordered inbox keeps per sender, committed with its group: the lowest
# batch id the sender may still send, and the last batch of its that ran here.
Sys = Callable[[SysKey], int | None]
SetSys = Callable[[SysKey, int], None]


def seen_key(procedure: str, sender: int) -> SysKey:
    return ("hop_next", procedure, sender)


def done_key(procedure: str, sender: int) -> SysKey:
    return ("hop_done", procedure, sender)


def marker_key(procedure: str) -> SysKey:
    """The last progress this engine has sent to `procedure`'s inboxes."""
    return ("hop_marker", procedure, 0)


@dataclass(order=True)
class Part:
    batch_id: int
    sender: int
    offset: int
    tuples: Sequence[Record] = field(compare=False)
    arrived: float = field(compare=False, default_factory=time.monotonic)


class HopInbox:
    """An ordered edge's input on one engine: parts from `senders` engines, given out batch
    by batch, in batch-id order, once every sender has passed the batch.

    Parts waiting here are not committed: the topic's committed position stays at the
    oldest of them, so a restart reads them again, and `done_key` skips those that ran."""

    def __init__(self, procedure: str, senders: int, sys: Sys, set_sys: SetSys) -> None:
        self.procedure, self.senders = procedure, senders
        self.sys, self.set_sys = sys, set_sys
        self.waiting: list[Part] = []
        self.next_offset: int | None = None  # after the last record received

    def receive(self, sender: int, batch_id: int, tuples: Sequence[Record], offset: int) -> None:
        """A part, or (no tuples) a marker: `sender` has passed `batch_id`."""
        self.next_offset = offset + 1
        key = seen_key(self.procedure, sender)
        seen = self.sys(key)
        if seen is None or batch_id + 1 > seen:
            self.set_sys(key, batch_id + 1)
        done = self.sys(done_key(self.procedure, sender))
        if tuples and (done is None or batch_id > done):
            heapq.heappush(self.waiting, Part(batch_id, sender, offset, tuples))

    def ready(self) -> Iterator[tuple[int, list[Part]]]:
        """The batches that may run now, in batch order, each as its parts in sender order
        (the procedure runs once per batch, on them all, as on one engine); each part is
        marked done as it is given out."""
        while self.waiting and self._whole(self.waiting[0].batch_id):
            batch_id, parts = self.waiting[0].batch_id, []
            while self.waiting and self.waiting[0].batch_id == batch_id:
                part = heapq.heappop(self.waiting)
                self.set_sys(done_key(self.procedure, part.sender), batch_id)
                parts.append(part)
            yield batch_id, parts

    def _whole(self, batch_id: int) -> bool:
        """Every sender has passed `batch_id`: all its parts are here, and nothing earlier
        can still come."""
        return not any(self._holds(v, batch_id) for v in range(self.senders))

    def _holds(self, v: int, batch_id: int) -> bool:
        seen = self.sys(seen_key(self.procedure, v))
        return seen is None or seen <= batch_id  # v may still send batch_id, or earlier

    def position(self) -> int | None:
        """The topic offset to commit: the oldest waiting part's, else past the last read."""
        if self.waiting:
            return min(p.offset for p in self.waiting)
        return self.next_offset

    def frontier(self) -> int | None:
        """The highest batch id up to which every sender's parts have run here."""
        seen = [self.sys(seen_key(self.procedure, v)) for v in range(self.senders)]
        if any(s is None for s in seen):
            return None
        low = min(s for s in seen if s is not None)
        if self.waiting:
            low = min(low, self.waiting[0].batch_id)
        return low - 1

    def oldest_wait(self) -> float:
        """Seconds the oldest waiting part has waited (0 with none)."""
        if not self.waiting:
            return 0.0
        return time.monotonic() - min(p.arrived for p in self.waiting)

    def waiting_for(self) -> list[int]:
        """The senders the next part in order waits for."""
        if not self.waiting:
            return []
        return [v for v in range(self.senders) if self._holds(v, self.waiting[0].batch_id)]


def route(proc: Procedure, out: OutputBatch, owner: Owner) -> list[OutputBatch]:
    """`out`'s tuples, split by the engine owning their new key for `proc`, in tuple order."""
    parts: dict[int, list[Record]] = {}
    for i, tup in enumerate(out.tuples):
        parts.setdefault(_place(proc, out.stream, i, tup, owner), []).append(tup)
    return [
        OutputBatch(out.stream, out.batch_id, tuples, hop=proc.name, partition=q)
        for q, tuples in sorted(parts.items())
    ]


def hop_batches(
    hops: Sequence[Procedure], outputs: Sequence[OutputBatch], owner: Owner
) -> list[OutputBatch]:
    """The parts of `outputs` for the repartitioned procedures reading their streams."""
    routed: list[OutputBatch] = []
    for out in outputs:
        for proc in hops:
            if proc.input == out.stream and out.tuples:
                routed += route(proc, out, owner)
    return routed


def _place(proc: Procedure, stream: str, i: int, tup: Record, owner: Owner) -> int:
    where = f"tuple {i} of stream {stream!r} for repartitioned procedure {proc.name!r}"
    by = proc.partition_by
    try:
        if isinstance(by, str):
            if by not in tup:
                raise TxnAbort("partition_key", f"{where}: it has no field {by!r}")
            key = tup[by]
        else:
            assert by is not None
            key = by(tup)
        return owner(_as_key(key))
    except TxnAbort:
        raise
    except Exception as e:
        raise TxnAbort("partition_key", f"{where}: no key: {exception_detail(e)}") from e


def _as_key(value: object) -> Key:
    if isinstance(value, tuple):
        return value
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return (value,)
    raise TypeError(f"{value!r} is a {type(value).__name__}, not an int, str or tuple of them")
