"""Formula updates (`table.add/max/append`): what a TE sees, and what the group keeps when
another TE changed the row after this one read it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from txstream import App, Record, TxnContext
from txstream.engine.context import TeContext as Context
from txstream.engine.context import TeTable as TableView
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.spanning import SpanPlan, keep_local
from txstream.engine.writeset import WriteSet, read
from txstream.model.errors import ConstraintViolation, TxnAbort
from txstream.testing import MemoryState


def engine() -> PartitionEngine:
    app = App("counters")
    app.stream("events", schema="none")
    app.table("counters", schema="none", constraints={"non_negative": lambda r: r["n"] >= 0})

    @app.procedure(input="events")
    def noop(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    e = PartitionEngine(app.dataflow(), MemoryState(), 0, {})
    e.group.ws.put("counters", (1,), {"n": 10, "high": 3, "log": ["a"]})
    return e


def ctx(e: PartitionEngine, ws: WriteSet) -> Context:
    proc = e.dataflow.decl.procedures["noop"]
    return Context(proc, 1, ws, e.base, e.dataflow.decl.tables, {}, {}, {}, lambda *a: None)


def row(e: PartitionEngine) -> Record | None:
    return read(e.group.ws, e.base, "counters", (1,))


def test_a_te_sees_its_formulas_at_once() -> None:
    e = engine()
    counters = ctx(e, WriteSet(e.group.ws)).table("counters")
    assert counters.add(1, {"n": 5}) == {"n": 15, "high": 3, "log": ["a"]}
    assert counters.max(1, {"high": 2})["high"] == 3
    assert counters.max(1, {"high": 9})["high"] == 9
    assert counters.append(1, {"log": ["b", "c"]})["log"] == ["a", "b", "c"]
    assert counters.get(1) == {"n": 15, "high": 9, "log": ["a", "b", "c"]}


def test_formulas_of_two_tes_that_read_the_same_row_both_count() -> None:
    """Both read n = 10; each adds; the second merges after the first: 10 + 5 + 7, where
    two puts of what each computed would leave 17 (a lost update)."""
    e = engine()
    first, second = WriteSet(e.group.ws), WriteSet(e.group.ws)
    ctx(e, first).table("counters").add(1, {"n": 5})
    ctx(e, second).table("counters").add(1, {"n": 7})
    ctx(e, second).table("counters").append(1, {"log": ["second"]})
    e.executor.merge(first)
    e.executor.merge(second)
    assert row(e) == {"n": 22, "high": 3, "log": ["a", "second"]}


def test_a_put_pins_the_row() -> None:
    """A plain write in the same TE stands, and formulas after it apply to it: nothing is
    recomputed from the group's row."""
    e = engine()
    other, mine = WriteSet(e.group.ws), WriteSet(e.group.ws)
    ctx(e, other).table("counters").add(1, {"n": 100})
    counters = ctx(e, mine).table("counters")
    counters.add(1, {"n": 1})  # superseded by the put
    counters.put(1, {"n": 0, "high": 0, "log": []})
    counters.add(1, {"n": 2})
    e.executor.merge(other)
    e.executor.merge(mine)
    assert row(e) == {"n": 2, "high": 0, "log": []}


def test_a_nested_write_set_carries_formulas_up_to_the_group() -> None:
    e = engine()
    outer = WriteSet(e.group.ws)
    inner, other = WriteSet(outer), WriteSet(e.group.ws)
    ctx(e, inner).table("counters").add(1, {"n": 3})
    e.executor.merge(inner, outer)  # not the group: kept as formulas
    ctx(e, other).table("counters").add(1, {"n": 4})
    e.executor.merge(other)
    e.executor.merge(outer)
    assert row(e) == {"n": 17, "high": 3, "log": ["a"]}


def test_a_spanning_te_keeps_only_its_own_formulas() -> None:
    e = engine()
    e.group.ws.put("counters", (2,), {"n": 1, "high": 0, "log": []})
    ws = WriteSet(e.group.ws)
    counters = ctx(e, ws).table("counters")
    counters.add(1, {"n": 1})
    counters.add(2, {"n": 1})
    keep_local(ws, SpanPlan({("counters", (1,)): 0, ("counters", (2,)): 1}), 0)
    assert ws.formulas is not None and list(ws.formulas) == [("counters", (1,))]


@pytest.mark.parametrize(
    ("call", "reason", "detail"),
    [
        (lambda t: t.add(2, {"n": 1}), "no_row", "key (2,): add {'n': 1}: a formula needs"),
        (lambda t: t.add(1, {"m": 1}), "bad_formula", "the row has no field 'm'"),
        (lambda t: t.add(1, {"n": "x"}), "bad_formula", "add 'x' to 'n': not a number"),
        (lambda t: t.append(1, {"log": "b"}), "bad_formula", "append 'b' to 'log': not a list"),
    ],
)
def test_a_bad_formula_aborts_naming_it(
    call: Callable[[TableView], object], reason: str, detail: str
) -> None:
    e = engine()
    with pytest.raises(TxnAbort) as caught:
        call(ctx(e, WriteSet(e.group.ws)).table("counters"))
    assert caught.value.reason == reason and detail in str(caught.value)


def test_a_formula_is_checked_against_the_table_constraints() -> None:
    e = engine()
    with pytest.raises(ConstraintViolation, match="non_negative"):
        ctx(e, WriteSet(e.group.ws)).table("counters").add(1, {"n": -11})
