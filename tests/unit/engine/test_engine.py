"""Partition-engine semantics: aborts leave no trace, nested transactions, triggers, order."""

from __future__ import annotations

from collections.abc import Sequence

from tests.support.fakes import MemoryBase
from txstream import TxnContext
from txstream.engine.group import Outcome, OutputBatch
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.writeset import WriteSet
from txstream.model.app import App
from txstream.model.declarations import Record
from txstream.model.errors import TxnAbort


def make_app(fail_on: int | None = None, nested: bool = False) -> App:
    """a -> first -> b -> second -> c; `second` raises on batch `fail_on`."""
    app = App("t")
    for s in ("a", "b", "c"):
        app.stream(s, schema="x.R")
    app.table("log", schema="x.R", constraints={"non_negative": lambda r: r["n"] >= 0})
    app.window("w", schema="x.R", rows=2, slide=2)

    @app.procedure(input="a", outputs=["b"], windows=["w"])
    def first(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for t in batch:
            ctx.table("log").put(("first", ctx.batch_id), {"n": t["n"]})
            ctx.window("w").insert(t)
            ctx.emit("b", {"n": t["n"] * 10})

    @app.procedure(input="b", outputs=["c"])
    def second(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for t in batch:
            ctx.table("log").put(("second", ctx.batch_id), {"n": t["n"]})
            if ctx.batch_id == fail_on:
                raise RuntimeError("boom")
            ctx.emit("c", t)

    if nested:
        app.nested("pair", ["first", "second"])
    return app


def engine_for(app: App) -> tuple[PartitionEngine, MemoryBase]:
    base = MemoryBase()
    return PartitionEngine(app.dataflow(), base, 0, app.params), base


def test_pe_trigger_runs_downstream_in_graph_order() -> None:
    engine, base = engine_for(make_app())
    engine.process("a", 1, [{"n": 1}])
    group = engine.take_group()
    assert [(o.stream, o.batch_id, list(o.tuples)) for o in group.outputs] == [
        ("b", 1, [{"n": 10}]),
        ("c", 1, [{"n": 10}]),
    ]
    base.apply(group)
    assert base.tables["log"] == {("first", 1): {"n": 1}, ("second", 1): {"n": 10}}


def test_exception_aborts_only_that_te_without_nesting() -> None:
    engine, base = engine_for(make_app(fail_on=2))
    engine.process("a", 1, [{"n": 1}])
    engine.process("a", 2, [{"n": 2}])
    group = engine.take_group()
    base.apply(group)
    assert [(a.procedure, a.batch_id, a.reason) for a in group.aborts] == [
        ("second", 2, "exception")
    ]
    assert "RuntimeError: boom" in group.aborts[0].error
    # first committed on batch 2; second's write and its output left no trace
    assert ("first", 2) in base.tables["log"]
    assert ("second", 2) not in base.tables["log"]
    assert ("c", 2) not in {(o.stream, o.batch_id) for o in group.outputs}


def test_nested_abort_rolls_back_every_member() -> None:
    engine, base = engine_for(make_app(fail_on=2, nested=True))
    engine.process("a", 1, [{"n": 1}])
    engine.process("a", 2, [{"n": 2}])
    group = engine.take_group()
    base.apply(group)
    assert [(a.procedure, a.reason) for a in group.aborts] == [("pair/second", "exception")]
    assert set(base.tables["log"]) == {("first", 1), ("second", 1)}
    assert {(o.stream, o.batch_id) for o in group.outputs} == {("b", 1), ("c", 1)}
    # the window insert of batch 2 was rolled back with the nested transaction
    assert [t["n"] for t in base.windows["w"].visible] == []
    assert [t["n"] for t in base.windows["w"].staged] == [1]


def test_a_nested_transaction_is_sealed_once_and_aborted_whole() -> None:
    """The record check sees the nested transaction's writes and outputs
    together, once; its abort drops every member's writes, outputs and window inserts."""
    sealed: list[tuple[set[tuple[object, ...]], list[tuple[str, int]]]] = []

    def seal(ws: WriteSet, outputs: list[OutputBatch]) -> list[OutputBatch]:
        sealed.append((set(ws.tables["log"]), [(o.stream, o.batch_id) for o in outputs]))
        if outputs[0].batch_id == 2:
            raise TxnAbort("output_too_large", "c 9 > 8")
        return outputs

    app = make_app(nested=True)
    base = MemoryBase()
    engine = PartitionEngine(app.dataflow(), base, 0, app.params, record_check=seal)
    engine.process("a", 1, [{"n": 1}])
    engine.process("a", 2, [{"n": 2}])
    group = engine.take_group()
    base.apply(group)
    assert sealed == [
        ({("first", 1), ("second", 1)}, [("b", 1), ("c", 1)]),
        ({("first", 2), ("second", 2)}, [("b", 2), ("c", 2)]),
    ]
    assert [(a.procedure, a.batch_id, a.reason, a.error) for a in group.aborts] == [
        ("pair", 2, "output_too_large", "output_too_large: c 9 > 8")
    ]
    assert set(base.tables["log"]) == {("first", 1), ("second", 1)}
    assert {(o.stream, o.batch_id) for o in group.outputs} == {("b", 1), ("c", 1)}
    assert [t["n"] for t in base.windows["w"].staged] == [1]


def test_nested_commit_keeps_window_slide() -> None:
    engine, base = engine_for(make_app(nested=True))
    engine.process("a", 1, [{"n": 1}])
    engine.process("a", 2, [{"n": 2}])
    base.apply(engine.take_group())
    assert [t["n"] for t in base.windows["w"].visible] == [1, 2]


def test_constraint_violation_aborts_with_reason() -> None:
    engine, base = engine_for(make_app())
    engine.process("a", 1, [{"n": -1}])
    group = engine.take_group()
    base.apply(group)
    assert [(a.procedure, a.reason) for a in group.aborts] == [("first", "constraint_violation")]
    assert "non_negative" in group.aborts[0].error
    assert "log" not in base.tables and group.outputs == []


def test_user_abort_leaves_no_trace_in_tables_windows_or_streams() -> None:
    app = App("t")
    app.stream("a", schema="x.R")
    app.stream("b", schema="x.R")
    app.table("t", schema="x.R")
    app.window("w", schema="x.R", rows=1, slide=1)

    @app.procedure(input="a", outputs=["b"], windows=["w"])
    def p(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.table("t").put(1, {"n": 1})
        ctx.window("w").insert({"n": 1})
        ctx.emit("b", {"n": 1})
        ctx.abort("not_today", "because")

    engine, base = engine_for(app)
    engine.process("a", 1, [{"n": 1}])
    group = engine.take_group()
    base.apply(group)
    assert [(a.reason, a.error) for a in group.aborts] == [("not_today", "not_today: because")]
    assert base.tables.get("t", {}) == {}
    assert "w" not in base.windows
    assert group.outputs == []


def test_read_your_writes_and_duplicate_batches() -> None:
    app = App("t")
    app.stream("a", schema="x.R")
    app.table("t", schema="x.R")
    seen: list[object] = []

    @app.procedure(input="a")
    def p(ctx: TxnContext, batch: Sequence[Record]) -> None:
        t = ctx.table("t")
        t.put(1, {"n": ctx.batch_id})
        seen.append(t.get(1))
        t.delete(1)
        seen.append(t.get(1))

    engine, _ = engine_for(app)
    assert engine.process("a", 5, [{}], record=b"5") is Outcome.PROCESSED
    assert engine.process("a", 5, [{}], record=b"5") is Outcome.DUPLICATE
    assert engine.process("a", 4, [{}], record=b"4") is Outcome.STALE
    assert seen == [{"n": 5}, None]


def test_window_of_another_procedure_is_refused_at_run_time() -> None:
    """Named at run time, where the dataflow's check of literal names cannot see it."""
    app = App("t")
    app.stream("a", schema="x.R")
    app.window("w", schema="x.R", rows=1, slide=1)

    @app.procedure(input="a")
    def p(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.window("".join(["w"]))

    engine, _ = engine_for(app)
    engine.process("a", 1, [{}])
    aborts = engine.take_group().aborts
    assert aborts[0].reason == "exception"
    assert "does not own window 'w'" in aborts[0].error


def test_emit_to_undeclared_output_is_an_error() -> None:
    app = App("t")
    app.stream("a", schema="x.R")

    @app.procedure(input="a")
    def p(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.emit("".join(["elsewhere"]), {})  # named at run time: seen only there

    engine, _ = engine_for(app)
    engine.process("a", 1, [{}])
    assert "not one of its declared outputs" in engine.take_group().aborts[0].error
