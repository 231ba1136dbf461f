"""Where a changelog micro-batch may end so that the mirrors show a state the app was in.

Kafka's read_committed end offsets fall between transactions, so each partition's part of a
micro-batch is whole engine commits. But a 2PC transaction commits once on each of its
partitions: a micro-batch may hold its debit on one partition and not yet its credit on the
other, and a reader of that epoch would see money vanish. The changelog shows each side: the
prepare writes the participant's `__prepared__` row, and the commit that applies the
decision deletes it, in the same engine commit as the transaction's writes. A spanning
procedure's batch likewise commits a part on each engine it touches; each engine's commit
names the parts it holds, and every engine with a part, in its commit-end header.

The cut takes, per partition, a prefix of whole commits (their ends are marked,
`txstream.commit.markers`) such that a transaction whose decision is applied inside the cut
on one partition has it applied inside the cut on every partition where the data shows it
prepared, and a spanning batch with a part inside it has every part inside it. It starts
from everything read and moves a partition back before the commit of any transaction or
batch that is not whole, until nothing moves (each step only moves back, so it ends). What
lies past the cut, and the prepared rows of transactions not yet whole, wait for a later
micro-batch (`held.HeldRows`). Every participant of a transaction that applied
its decision was prepared before any did, and a micro-batch's end offsets are read
together, so a partition whose part of the transaction the cut needs has at least its
prepare in the data read; a spanning batch names all its parts' engines itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from txstream.engine.group import SpanPart
from txstream.engine.participant import PREPARED_TABLE

PREPARED = PREPARED_TABLE  # a participant's prepared row: the 2PC transaction's id
COMMIT = "__commit__"  # the end of a commit whose last record goes to no mirror
SPAN = "__span__"  # a spanning batch's part in a commit, and the engines with a part
MARKS = (PREPARED, COMMIT, SPAN)


def span_txn(span: SpanPart) -> str:
    """A spanning batch as the cut names it, apart from 2PC transaction ids."""
    return f"span:{span.stream}:{span.batch_id}"


@dataclass(frozen=True)
class Marker:
    """A changelog record the cut looks at: a commit's last, or a prepared row's change."""

    partition: int
    offset: int
    commit_end: bool = False
    txn: str | None = None  # a prepared row's transaction, or a spanning batch
    applied: bool = False  # the prepared row deleted (the decision applied here), or a part
    parts: tuple[int, ...] = ()  # a spanning batch: every partition with a part


@dataclass(frozen=True)
class Cut:
    upto: dict[int, int]  # partition -> the last offset taken (-1: none of this micro-batch)
    waiting: frozenset[str]  # transactions not whole inside the cut: their prepared rows wait

    def holds_back(self, last: Mapping[int, int]) -> bool:
        """Whether anything read waits for a later micro-batch."""
        return bool(self.waiting) or any(self.upto[p] < o for p, o in last.items())


def consistent_cut(markers: Iterable[Marker], last: Mapping[int, int]) -> Cut:
    """The cut of the records read, `last` their highest offset per partition."""
    ends: dict[int, list[int]] = {}
    applied: dict[str, dict[int, int]] = {}
    seen: dict[str, set[int]] = {}
    for m in markers:
        if m.commit_end:
            ends.setdefault(m.partition, []).append(m.offset)
        if m.txn is not None:
            seen.setdefault(m.txn, set()).update((m.partition, *m.parts))
            if m.applied:
                applied.setdefault(m.txn, {})[m.partition] = m.offset
    upto = dict(last)
    moved = True
    while moved:
        moved = False
        for txn, at in applied.items():
            inside = [p for p, o in at.items() if o <= upto[p]]
            if inside and not _whole(seen[txn], at, upto):
                for p in inside:
                    upto[p] = _commit_start(ends.get(p, []), at[p]) - 1
                moved = True
    whole = {t for t, parts in seen.items() if _whole(parts, applied.get(t, {}), upto)}
    return Cut(upto, frozenset(seen.keys() - whole))


def _whole(parts: set[int], applied: Mapping[int, int], upto: Mapping[int, int]) -> bool:
    return all(p in applied and applied[p] <= upto[p] for p in parts)


def _commit_start(ends: list[int], offset: int) -> int:
    """The first offset of the commit holding `offset`: just past the last end before it.
    Without one in the data, the commit may have begun anywhere read: 0 takes none of it."""
    before = [e for e in ends if e < offset]
    return max(before) + 1 if before else 0
