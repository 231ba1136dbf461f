"""Split commit, the partition's side (WiSer's PROMISE): a promised transaction runs here
at once and is held; SERIALIZE, in the coordinator, decides it later.

A client writes a `promise` request straight to this partition's log (`<app>.promises`),
and the broker's acknowledgement of that write is the promise: durable, and certain to get a final
status. The engine runs the fragments in its input order against its committed state, and
then either replies a failure (the status is final at once: aborted) or holds the write
set (in `__promised__`, committed with the group) and replies its *deltas*: what it adds to
each running total of the tables' aggregation constraints. The coordinator adds them in
the order the replies reach it, aborts a transaction that would cross a bound, and sends
the decision back; only then do the held writes land, as formulas recomputed on the rows as
they stand (`engine.formulas`), so promised transactions on one hot row never conflict and
hold no locks: unlike a 2PC prepare, a promise blocks nothing.

Three rules keep every row equal to its start plus exactly the committed changes:
- deltas are each row's contribution after less before, however it was written;
- a promise's plain write (put) of a row that exists is held as the fields it changed
  (summed fields as adds, others set), so it lands on the row as it then stands; a promise
  that creates or deletes a constrained row is alone on that row until it lands;
- a committed promise lands only once no prepared 2PC transaction locks its rows: that one
  read them before, and its own writes land first (`landing`).
A promise's id is its place in the promises topic (`promise_id`), never its client's
choice, so no promise can be named after another transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from txstream.engine import held_writes
from txstream.engine.formulas import Formula, pinned
from txstream.engine.group import CommitGroup
from txstream.engine.writeset import TOMBSTONE, Base, WriteSet, read
from txstream.model.declarations import Key, Record, Table
from txstream.model.errors import TxnAbort
from txstream.oltp.messages import Decision

PROMISED_TABLE = "__promised__"
# A delta reply: [[constraint's total key (AggregateConstraint.total_key), delta], ...]
Deltas = list[list[Any]]
# Promise ids are their records' places (`promise_id`), never a client's choice: a client
# that named its promise after a 2PC transaction would otherwise take that one's decision.
_PROMISE_PREFIX = "P"


def promise_id(partition: int, offset: int) -> str:
    """The id of the promised (or BASE) transaction at `offset` of the promises topic's
    `partition`, whatever id its client gave: unique, the same each time the record is
    read (after a crash, or by `txstream verify`), and no coordinator transaction id
    (`<epoch>.<seq>`) starts with the prefix."""
    return f"{_PROMISE_PREFIX}{partition}.{offset}"


def endpoint_call_id(partition: int, request_id: str) -> str:
    """The id of a direct transaction sent to `partition`'s worker endpoint rather than to
    the promises topic: it has no place there, so its request id (unique per request, the
    same on each resend) names it, under the prefix clients' transactions have."""
    return f"{_PROMISE_PREFIX}{partition}.{request_id}"


def is_promise_id(txn_id: str) -> bool:
    return txn_id.startswith(_PROMISE_PREFIX)


def deltas(
    ws: WriteSet, tables: dict[str, Table], before: Callable[[str, Key], Record | None]
) -> Deltas:
    """What `ws` adds to each aggregation constraint's running total, by group: for each
    row it wrote, its contribution after less its contribution before (`before`: the row
    as the transaction found it), however the row was written (put, add, delete)."""
    out: dict[str, float] = {}
    for table, rows in ws.tables.items():
        declared = tables.get(table)
        bounds = declared.aggregates if declared is not None else ()
        for key, row in rows.items() if bounds else ():
            new = None if row is TOMBSTONE else row
            old = before(table, key)
            for a in bounds:
                for contribution, sign in ((a.contribution(new), 1), (a.contribution(old), -1)):
                    if contribution is not None:
                        group, amount = contribution
                        out[group] = out.get(group, 0) + sign * amount
    return [[k, v] for k, v in sorted(out.items()) if v]


def _as_changes(
    ws: WriteSet, tables: dict[str, Table], before: Callable[[str, Key], Record | None]
) -> None:
    """Keep each row `ws` updated with a plain write (it was there before and after) as
    the fields it changed: a summed field as an add, any other as a set. Held until its
    decision, a whole row would land as it stood when the promise ran, over what others
    committed to its other fields meanwhile (a lost update); field by field, it lands on
    the row as it then stands. A row created or deleted stays a plain write."""
    for table, rows in ws.tables.items():
        declared = tables.get(table)
        summed = {a.field for a in declared.aggregates if a.field} if declared else set()
        for key, row in rows.items():
            if row is TOMBSTONE or not pinned(ws, table, key):
                continue
            old = before(table, key)
            if old is None or set(old) != set(row):
                continue
            if ws.formulas is None:
                ws.formulas = {}
            ws.formulas[(table, key)] = [
                Formula("add", f, row[f] - old[f]) if f in summed else Formula("set", f, row[f])
                for f in row
                if row[f] != old[f]
            ]


class Promises:
    """The promised transactions this engine holds until SERIALIZE decides them, and those
    committed but waiting to land until no prepared 2PC transaction locks their rows."""

    def __init__(self, base: Base, group: Callable[[], CommitGroup]) -> None:
        self._base = base
        self._group = group
        self.held: dict[str, WriteSet] = {}  # txn id -> its write set
        # Committed, in decision order, each waiting for a 2PC transaction prepared on one
        # of its rows: that one read the rows before this landed, so it lands first.
        self.landing: dict[str, WriteSet] = {}
        self._decided = 0  # commit decisions taken: the order the landing ones keep

    def load(self) -> None:
        """After a restart: the promised transactions not decided before the crash, and
        the committed ones not landed yet."""
        landing = []
        for (txn_id,), row in self._base.scan(PROMISED_TABLE, ()):
            ws, extra = held_writes.decode(row["writes"])
            if extra.get("decided"):
                landing.append((row["epoch"], str(txn_id), ws))
            else:
                self.held[str(txn_id)] = ws
        for order, txn_id, ws in sorted(landing):
            self.landing[txn_id] = ws
            self._decided = max(self._decided, order)

    def hold(self, txn_id: str, ws: WriteSet, tables: dict[str, Table]) -> Deltas:
        """Keep `ws` (durably, with the group) until its decision; its deltas. A row it
        updated with a plain write is kept as the fields it changed (`_as_changes`).
        TxnAbort for a row whose group cannot be named, or for a row of a constrained
        table that another promise not landed yet writes too, where either creates or
        deletes it (or, on a counted table, writes it at all): what such a row holds when
        both land depends on their order, and the totals must be known now."""
        group = self._group().ws
        before = lambda t, k: read(group, self._base, t, k)  # noqa: E731
        try:
            out = deltas(ws, tables, before)
        except KeyError as e:
            raise TxnAbort("bad_row", str(e.args[0])) from None
        _as_changes(ws, tables, before)
        for table, rows in ws.tables.items():
            declared = tables.get(table)
            if declared is None or not declared.aggregates:
                continue
            counted = any(a.counts for a in declared.aggregates)
            for key in rows:
                other = self._writer(table, key, any_write=counted or pinned(ws, table, key))
                if other is not None:
                    raise TxnAbort("promised_row", f"table {table!r} key {list(key)} is "
                                   f"written by promise {other}, which has not landed yet, "
                                   "and one of them creates or deletes it: retry once it "
                                   "has its status")  # fmt: skip
        ws.detach()  # held on its own: the group it read through commits meanwhile
        self.held[txn_id] = ws
        group.put(PROMISED_TABLE, (txn_id,), _row(ws, None, deltas=out))
        return out

    def writes(self, table: str, key: Key | None) -> bool:
        """Whether a promise not landed yet writes the row (for a scan, `key` None: any row
        of the table): its client may be told it committed before its decision lands."""
        if key is not None:
            return self._writer(table, key, True) is not None
        return any(table in ws.tables for p in (self.held, self.landing) for ws in p.values())

    def _writer(self, table: str, key: Key, any_write: bool) -> str | None:
        """A promise not landed that writes the row: in any way with `any_write`, else
        plainly."""
        for pending in (self.held, self.landing):
            for txn, ws in pending.items():
                if key in ws.tables.get(table, ()) and (any_write or pinned(ws, table, key)):
                    return txn
        return None

    def decide(
        self, d: Decision, merge: Callable[[WriteSet], None], locked: Callable[[WriteSet], bool]
    ) -> str:
        """Take `d` for a promise: drop its writes, or land them (`merge`) now or, while
        one of its rows is held (`locked`: a prepared transaction's lock, a queued spanning
        batch's read), once it is not. What happened, for the acknowledgement."""
        ws = self.held.pop(d.txn_id, None)
        if ws is None:
            return "not held here"  # decided already, or never promised here
        if not d.commit:
            self._group().ws.put(PROMISED_TABLE, (d.txn_id,), TOMBSTONE)
            return "aborted"
        self.landing[d.txn_id] = ws
        self._decided += 1
        self._group().ws.put(PROMISED_TABLE, (d.txn_id,), _row(ws, self._decided))
        self.land(merge, locked)
        return "committed"

    def land(self, merge: Callable[[WriteSet], None], locked: Callable[[WriteSet], bool]) -> bool:
        """Land the committed promises whose rows are not held (`locked`), in decision
        order: one behind a held one on a common row waits too. True if any landed."""
        waiting: set[tuple[str, Key]] = set()
        landed = False
        for txn_id, ws in list(self.landing.items()):
            rows = {(t, k) for t, written in ws.tables.items() for k in written}
            if locked(ws) or not waiting.isdisjoint(rows):
                waiting |= rows
                continue
            del self.landing[txn_id]
            merge(ws)
            self._group().ws.put(PROMISED_TABLE, (txn_id,), TOMBSTONE)
            landed = True
        return landed


def _row(ws: WriteSet, order: int | None, deltas: Deltas | None = None) -> Record:
    """A `__promised__` row: held (`order` None), or committed and waiting to land, the
    `order`th decided (kept in `epoch`, so a reload lands them in decision order)."""
    writes = held_writes.encode(ws, decided=order is not None)
    return {"epoch": order or 0, "writes": writes, "request_id": "", "reply_to": "",
            "results": json.dumps(deltas or [])}  # fmt: skip
