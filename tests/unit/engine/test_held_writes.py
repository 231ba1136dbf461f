"""A held write set's durable form (`engine.held_writes`): rows and formulas both come back,
and the older form, a plain list of rows, still reads."""

from __future__ import annotations

from txstream.engine import held_writes
from txstream.engine.formulas import Formula
from txstream.engine.writeset import TOMBSTONE, WriteSet


def test_rows_formulas_and_extra_fields_come_back() -> None:
    ws = WriteSet()
    ws.put("accounts", (1,), {"balance": 70})
    ws.put("accounts", (2,), TOMBSTONE)
    ws.put("shows", (7, "a"), {"sold": 3})
    ws.formulas = {("shows", (7, "a")): [Formula("add", "sold", 3)]}
    back, extra = held_writes.decode(held_writes.encode(ws, decided=True))
    assert back.tables == ws.tables
    assert back.formulas == ws.formulas
    assert extra == {"decided": True}


def test_a_write_set_without_formulas_keeps_none() -> None:
    ws = WriteSet()
    ws.put("accounts", (1,), {"balance": 1})
    back, extra = held_writes.decode(held_writes.encode(ws))
    assert back.formulas is None and extra == {}


def test_the_older_plain_list_of_rows_reads() -> None:
    older = '[["accounts", [1], {"balance": 70}], ["accounts", [2], null]]'
    back, extra = held_writes.decode(older)
    assert back.tables == {"accounts": {(1,): {"balance": 70}, (2,): TOMBSTONE}}
    assert back.formulas is None and extra == {}
