"""Procedures whose batches span partition engines, run deterministically (as in Calvin).

A spanning procedure declares, per input tuple, the (table, key) pairs the tuple touches.
Each batch of its input reaches the engines owning a key it declares, in batch order: every
engine sees the batches that touch it, in the one sequence. For each batch, the engines
owning any declared key (the participants) each send the others the committed-order values
of their own declared keys, as of the batch's place in the sequence; then each runs the
whole batch over the union of those values and keeps only the writes to its own keys. The
procedure is deterministic, so every participant computes the same writes, outputs and
abort: no vote or decision is needed, and the batch is serializable in input order across
engines (TSpoon's PL4) by construction. The lowest participant (the leader) emits the
batch's outputs and dead letters, once.

A read of an undeclared key aborts the TE on every participant alike (whether the key
happens to be local or not), so a wrong declaration is an error, never a divergence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from txstream.engine.windows import WindowState
from txstream.engine.writeset import Base, WriteSet, read
from txstream.model.declarations import Key, Record, Touches
from txstream.model.errors import TxnAbort

Owner = Callable[[Key], int]
Rows = dict[tuple[str, Key], Record | None]


@dataclass(frozen=True)
class SpanPlan:
    """Who takes part in one batch, and which keys it may touch."""

    owners: dict[tuple[str, Key], int]  # each declared (table, key) -> its engine

    @classmethod
    def of(cls, touches: Touches, tuples: Sequence[Record], owner: Owner) -> SpanPlan:
        keys = {
            (table, key if isinstance(key, tuple) else (key,))
            for tup in tuples
            for table, key in touches(tup)
        }
        return cls({k: owner(k[1]) for k in keys})

    @property
    def participants(self) -> frozenset[int]:
        """The engines owning a declared key; engine 0 alone for a batch that declares none
        (it still runs, and may emit)."""
        return frozenset(self.owners.values()) or frozenset({0})

    @property
    def leader(self) -> int:
        return min(self.participants)

    def local(self, me: int) -> list[tuple[str, Key]]:
        return sorted((k for k, p in self.owners.items() if p == me), key=repr)


@dataclass(frozen=True)
class Reads:
    """One participant's values of its declared keys for one batch: what it sends the others.
    A large set travels as `parts` records, numbered by `part`."""

    stream: str
    batch_id: int
    sender: int
    rows: Rows
    part: int = 0
    parts: int = 1


def local_reads(plan: SpanPlan, me: int, ws: WriteSet, base: Base) -> Rows:
    """This engine's declared keys, as of everything before the batch (committed or not)."""
    return {(t, k): read(ws, base, t, k) for t, k in plan.local(me)}


class SpanBase:
    """The base a spanning TE reads through: local keys from the engine's own state, the
    others from the participants' `Reads`; anything undeclared aborts the TE."""

    def __init__(
        self, plan: SpanPlan, me: int, local: Base, remote: Rows, epoch: bool = False
    ) -> None:
        """`epoch`: every declared key, local ones too, is read from `remote`, the values
        as of the epoch's start (`engine.epochs`)."""
        self._plan, self._me, self._local, self._remote = plan, me, local, remote
        self._epoch = epoch

    def get(self, table: str, key: Key) -> Record | None:
        k = (table, key)
        owner = self._plan.owners.get(k)
        if owner is None:
            raise TxnAbort(
                "undeclared_key",
                f"table {table!r} key {key!r} is not among the keys this batch declared",
            )
        if owner == self._me and not self._epoch:
            return self._local.get(table, key)
        return self._remote[k]

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        raise TxnAbort("undeclared_key", f"a spanning procedure cannot scan table {table!r}")

    def window(self, name: str) -> WindowState | None:
        raise TxnAbort("undeclared_key", f"a spanning procedure has no window ({name!r})")


def keep_local(ws: WriteSet, plan: SpanPlan, me: int) -> None:
    """Drop the TE's writes to other engines' keys: their owners make the same writes. A
    write to an undeclared key aborts the TE (on every participant alike)."""
    for table, rows in ws.tables.items():
        for key in list(rows):
            owner = plan.owners.get((table, key))
            if owner is None:
                raise TxnAbort(
                    "undeclared_key",
                    f"table {table!r} key {key!r} is not among the keys this batch declared",
                )
            if owner != me:
                del rows[key]
                if ws.formulas:
                    ws.formulas.pop((table, key), None)


@dataclass(frozen=True)
class Span:
    """How a spanning TE runs here: through whose base, and whether it speaks for all."""

    plan: SpanPlan
    base: SpanBase
    me: int
    leader: bool
    epoch: bool = False  # it reads as of its epoch's start, not through the group's writes
