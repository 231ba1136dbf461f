"""Formula updates (Rubato DB's formula protocol): a write kept as what it does, `+5`, not as
the value it computed.

`table.add(key, {"balance": -5})` changes the row the transaction sees at once (it reads
its own writes), and also records the formula. When the transaction's writes merge into the
group, a row changed only by formulas is recomputed from the group's row *at that moment*:
formulas of one kind commute, so two transactions adding to one counter each add, whatever
the other did since it read. Where a transaction read the row as it stood at that moment
(everywhere but below PL3, `engine.epochs`), the result is the same as its own computed
value; below PL3, where a batch reads its epoch's start, formulas are what keep the other
batches' changes of the epoch (no lost update). A plain `put` or `delete` of the row in the
same transaction pins it: the value written stands, and later formulas on it apply to it.

Constraints are checked on the value the transaction computed; a recomputed value is not
checked again (it would need every engine to agree on an abort after the fact).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from txstream.engine.rows import private
from txstream.engine.writeset import Base, WriteSet, read
from txstream.model.declarations import Key, Record

# `set` is not a call of its own: a promised transaction's plain write of a row that
# existed is held as the fields it changed (`engine.promises`), each set where it lands.
Op = Literal["add", "max", "append", "set"]


@dataclass(frozen=True)
class Formula:
    op: Op
    field: str
    value: Any


def formulas_of(op: Op, values: Mapping[str, Any]) -> list[Formula]:
    """The formulas of one call; appended items are copied, as every row put is."""
    if op == "append":
        return [Formula(op, f, copy.deepcopy(v)) for f, v in values.items()]
    return [Formula(op, f, v) for f, v in values.items()]


def apply(row: Record, formulas: list[Formula]) -> Record:
    """`row` with `formulas` applied in order; raises KeyError for a field the row lacks and
    TypeError for a value of the wrong kind."""
    new = private(row)
    for f in formulas:
        current = new[f.field]
        if f.op == "add":
            if isinstance(f.value, bool) or not isinstance(f.value, int | float):
                raise TypeError(f"add {f.value!r} to {f.field!r}: not a number")
            new[f.field] = current + f.value
        elif f.op == "max":
            new[f.field] = max(current, f.value)
        elif f.op == "set":
            new[f.field] = copy.deepcopy(f.value)
        else:
            if not isinstance(f.value, list | tuple):
                raise TypeError(f"append {f.value!r} to {f.field!r}: not a list")
            new[f.field] = [*current, *copy.deepcopy(list(f.value))]
    return new


def record(ws: WriteSet, table: str, key: Key, formulas: list[Formula], pinned: bool) -> None:
    """Keep `formulas` for (table, key) in `ws`, unless a plain write there pins the row."""
    if pinned:
        return
    if ws.formulas is None:
        ws.formulas = {}
    ws.formulas.setdefault((table, key), []).extend(formulas)


def pinned(ws: WriteSet, table: str, key: Key) -> bool:
    """Whether `ws` itself holds a plain write of the row (not one made of formulas)."""
    rows = ws.tables.get(table)
    if rows is None or key not in rows:
        return False
    return ws.formulas is None or (table, key) not in ws.formulas


def unpin(ws: WriteSet, table: str, key: Key) -> None:
    """A plain write of the row: formulas on it so far are superseded."""
    if ws.formulas:
        ws.formulas.pop((table, key), None)


def rebase(ws: WriteSet, group: WriteSet, base: Base) -> None:
    """Before `ws` merges into the group: recompute its formula-only rows from the group's
    rows now. A row gone meanwhile keeps the value the transaction computed."""
    assert ws.formulas is not None
    for (table, key), formulas in ws.formulas.items():
        current = read(group, base, table, key)
        if current is not None:
            ws.tables[table][key] = apply(current, formulas)
    ws.formulas = None


def carry(ws: WriteSet, parent: WriteSet) -> None:
    """Before `ws` merges into a parent that is not the group (a nested transaction's, or a
    batch's own below PL3): the parent takes its formulas, and its plain writes unpin."""
    theirs = parent.formulas
    if theirs:
        for table, rows in ws.tables.items():
            for key in rows:
                if ws.formulas is None or (table, key) not in ws.formulas:
                    theirs.pop((table, key), None)
    if not ws.formulas:
        return
    if theirs is None:
        theirs = parent.formulas = {}
    for (table, key), formulas in ws.formulas.items():
        if not pinned(parent, table, key):  # a plain write there: ours were based on it
            theirs.setdefault((table, key), []).extend(formulas)
    ws.formulas = None
