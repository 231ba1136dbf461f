"""Split commit, the partition's side (WiSer's PROMISE): a promised transaction runs here
at once and is held; SERIALIZE, in the coordinator, decides it later.

A client writes a `promise` request straight to this partition's request log, and the
broker's acknowledgement of that write is the promise: durable, and certain to get a final
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
from dataclasses import dataclass
from typing import Any

from txstream.engine.formulas import Formula
from txstream.engine.group import Group
from txstream.engine.writeset import TOMBSTONE, Base, WriteSet
from txstream.model.declarations import Table
from txstream.model.errors import TxnAbort
from txstream.oltp.messages import Decision

PROMISED_TABLE = "__promised__"
# A delta reply: [[constraint's total key (AggregateConstraint.total_key), delta], ...]
Deltas = list[list[Any]]


@dataclass
class Held:
    txn_id: str
    ws: WriteSet


def deltas(ws: WriteSet, tables: dict[str, Table]) -> Deltas:
    """What `ws` adds to each aggregation constraint's running total, by group. Every
    change to a summed field is an `add` formula here (`TableView._bounded` refused the
    rest); the group comes from the row as the transaction left it."""
    out: dict[str, float] = {}
    for (table, _key), todo in (ws.formulas or {}).items():
        bounds = tables[table].aggregates
        if not bounds:
            continue
        row = ws.tables[table][_key]
        for a in bounds:
            added = sum(f.value for f in todo if f.op == "add" and f.field == a.field)
            if added:
                k = a.total_key(a.group_of(row))
                out[k] = out.get(k, 0) + added
    return [[k, v] for k, v in sorted(out.items())]


class Promises:
    """The promised transactions this engine holds until SERIALIZE decides them."""

    def __init__(self, base: Base, group: Callable[[], Group]) -> None:
        self._base = base
        self._group = group
        self.held: dict[str, Held] = {}

    def load(self) -> None:
        """After a restart: the promised transactions not decided before the crash."""
        for (txn_id,), row in self._base.scan(PROMISED_TABLE, ()):
            self.held[str(txn_id)] = Held(str(txn_id), _ws_of(row["writes"]))

    def hold(self, txn_id: str, ws: WriteSet, tables: dict[str, Table]) -> Deltas:
        """Keep `ws` (durably, with the group) until its decision; its deltas, or TxnAbort
        for a row whose group cannot be named."""
        try:
            out = deltas(ws, tables)
        except KeyError as e:
            raise TxnAbort("bad_row", str(e.args[0])) from None
        ws.parent = None  # held on its own: the group it read through commits meanwhile
        self.held[txn_id] = Held(txn_id, ws)
        row = {"epoch": 0, "writes": _ws_json(ws), "request_id": "", "reply_to": "",
               "results": json.dumps(out)}  # fmt: skip
        self._group().ws.put(PROMISED_TABLE, (txn_id,), row)
        return out

    def decide(self, d: Decision, merge: Callable[[WriteSet], None]) -> bool:
        """Apply (`merge`) or drop the held writes; False if `d` is not about a promise
        held here (a repeat of one decided already is acknowledged as such upstream)."""
        held = self.held.pop(d.txn_id, None)
        if held is None:
            return False
        if d.commit:
            merge(held.ws)
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
