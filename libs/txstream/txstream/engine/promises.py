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
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from txstream.engine.formulas import Formula
from txstream.engine.group import Group
from txstream.engine.writeset import TOMBSTONE, Base, WriteSet, read
from txstream.model.declarations import Key, Record, Table
from txstream.model.errors import TxnAbort
from txstream.oltp.messages import Decision

PROMISED_TABLE = "__promised__"
# A delta reply: [[constraint's total key (AggregateConstraint.total_key), delta], ...]
Deltas = list[list[Any]]


def deltas(
    ws: WriteSet, tables: dict[str, Table], before: Callable[[str, Key], Record | None]
) -> Deltas:
    """What `ws` adds to each aggregation constraint's running total, by group. Every
    change to a summed field is an `add` formula here, and every change to a count a row
    created or deleted (`TableView._bounded` refused the rest); `before` is a row as the
    transaction found it."""
    out: dict[str, float] = {}

    def count(key: str, amount: float) -> None:
        out[key] = out.get(key, 0) + amount

    for table, rows in ws.tables.items():
        declared = tables.get(table)
        bounds = declared.aggregates if declared is not None else ()
        for key, row in rows.items() if bounds else ():
            new = None if row is TOMBSTONE else row
            todo = (ws.formulas or {}).get((table, key), [])
            for a in bounds:
                if a.counts:
                    old = before(table, key)
                    if (old is None) != (new is None):
                        k, _ = a.contribution(new if old is None else old) or ("", 0)
                        count(k, 1 if old is None else -1)
                    continue
                added = sum(f.value for f in todo if f.op == "add" and f.field == a.field)
                if added and new is not None:
                    count(a.total_key(a.group_of(new)), added)
    return [[k, v] for k, v in sorted(out.items()) if v]


class Promises:
    """The promised transactions this engine holds until SERIALIZE decides them."""

    def __init__(self, base: Base, group: Callable[[], Group]) -> None:
        self._base = base
        self._group = group
        self.held: dict[str, WriteSet] = {}  # txn id -> its write set

    def load(self) -> None:
        """After a restart: the promised transactions not decided before the crash."""
        for (txn_id,), row in self._base.scan(PROMISED_TABLE, ()):
            self.held[str(txn_id)] = _ws_of(row["writes"])

    def hold(self, txn_id: str, ws: WriteSet, tables: dict[str, Table]) -> Deltas:
        """Keep `ws` (durably, with the group) until its decision; its deltas. TxnAbort for
        a row whose group cannot be named, or for a row of a counted table that a promise
        still held writes too: which of the two would create or delete it is only known
        when both land, and the count must be known now."""
        for table, rows in ws.tables.items():
            declared = tables.get(table)
            if declared is None or not any(a.counts for a in declared.aggregates):
                continue
            for key in rows:
                other = next((txn for txn, held in self.held.items()
                              if key in held.tables.get(table, {})), None)  # fmt: skip
                if other is not None:
                    raise TxnAbort("promised_row", f"table {table!r} key {list(key)} is "
                                   f"written by promise {other}, not decided yet: retry once "
                                   "it has its status")  # fmt: skip
        group = self._group().ws
        try:
            out = deltas(ws, tables, lambda t, k: read(group, self._base, t, k))
        except KeyError as e:
            raise TxnAbort("bad_row", str(e.args[0])) from None
        ws.parent = None  # held on its own: the group it read through commits meanwhile
        self.held[txn_id] = ws
        row = {"epoch": 0, "writes": _ws_json(ws), "request_id": "", "reply_to": "",
               "results": json.dumps(out)}  # fmt: skip
        group.put(PROMISED_TABLE, (txn_id,), row)
        return out

    def decide(self, d: Decision, merge: Callable[[WriteSet], None]) -> bool:
        """Apply (`merge`) or drop the held writes; False if `d` is not about a promise
        held here (a repeat of one decided already is acknowledged as such upstream)."""
        held = self.held.pop(d.txn_id, None)
        if held is None:
            return False
        if d.commit:
            merge(held)
        self._group().ws.put(PROMISED_TABLE, (d.txn_id,), TOMBSTONE)
        return True


def _ws_json(ws: WriteSet) -> str:
    """Rows and the formulas that made them: at the decision the formulas are applied to
    the rows as they then stand, the rows only where one was gone meanwhile."""
    rows = [
        [t, list(k), None if v is TOMBSTONE else v]
        for t, written in ws.tables.items()
        for k, v in written.items()
    ]
    formulas = [
        [t, list(k), [[f.op, f.field, f.value] for f in todo]]
        for (t, k), todo in (ws.formulas or {}).items()
    ]
    return json.dumps({"rows": rows, "formulas": formulas})


def _ws_of(text: str) -> WriteSet:
    data = json.loads(text)
    ws = WriteSet()
    for table, key, row in data["rows"]:
        ws.put(table, tuple(key), TOMBSTONE if row is None else row)
    if data["formulas"]:
        ws.formulas = {
            (t, tuple(k)): [Formula(op, field, value) for op, field, value in todo]
            for t, k, todo in data["formulas"]
        }
    return ws
