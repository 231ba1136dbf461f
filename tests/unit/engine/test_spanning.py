"""Spanning procedures: what the model refuses, and what a TE may touch."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from bank.refunds import build_app as build_refunds
from txstream import App, Record, TxnContext
from txstream.config import Settings
from txstream.engine.group import SYS_TABLE, Outcome
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.spanning import Reads
from txstream.model.declarations import Key
from txstream.model.errors import DataflowError
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.state.reads_codec import ReadsCodec, ReadsDecodeError
from txstream.testing import MemoryState


def spanning_app(reads_key: int = 1, recovery: str = "changelog") -> App:
    app = App("span", recovery=recovery)
    events = app.stream("events", schema="bank.Payment")
    app.stream("out", schema="bank.Payment")
    app.table("accounts", schema="bank.Account")

    @app.procedure(input=events, outputs=["out"],
                   touches=lambda t: [("accounts", t["employer"])])  # fmt: skip
    def move(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for t in batch:
            row = ctx.table("accounts").get(reads_key) or {"balance": 0}
            ctx.table("accounts").put(t["employer"], {"balance": row["balance"] + t["amount"]})
            ctx.emit("out", t)

    return app


def test_a_read_of_an_undeclared_key_aborts_the_te() -> None:
    engine = PartitionEngine(spanning_app(reads_key=2).dataflow(), MemoryState(), 0, {})
    engine.process("events", 1, [{"employer": 1, "employee": 0, "amount": 5}])
    group = engine.take_group()
    assert [a.reason for a in group.aborts] == ["undeclared_key"]
    assert "key (2,)" in group.aborts[0].error
    assert group.outputs == [] and "accounts" not in group.ws.tables


def test_a_declared_key_is_read_and_written() -> None:
    engine = PartitionEngine(spanning_app().dataflow(), MemoryState(), 0, {})
    engine.process("events", 1, [{"employer": 1, "employee": 0, "amount": 5}])
    group = engine.take_group()
    assert group.aborts == [] and group.ws.tables["accounts"][(1,)] == {"balance": 5}


def test_spanning_needs_changelog_recovery() -> None:
    with pytest.raises(DataflowError, match="need changelog recovery, not strong"):
        spanning_app(recovery="strong").dataflow()


def test_a_spanning_procedure_must_end_the_dataflow() -> None:
    app = spanning_app()

    @app.procedure(input="out")
    def after(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    with pytest.raises(DataflowError, match="its output 'out' cannot feed a procedure"):
        app.dataflow()


def test_a_spanning_input_has_no_other_reader() -> None:
    app = spanning_app()

    @app.procedure(input="events")
    def also(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    with pytest.raises(DataflowError, match="must be the only reader of 'events'"):
        app.dataflow()


def test_an_app_may_have_several_spanning_streams_at_pl3_or_pl4() -> None:
    """Their batches run in one global order; below PL3 an epoch's reads are per stream,
    so two spanning streams are refused there, naming the stream."""
    app = spanning_app()
    app.stream("more", schema="bank.Payment")

    @app.procedure(input="more", touches=lambda t: [("accounts", t["employer"])])
    def also(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    assert sorted(app.dataflow().spanning_streams) == ["events", "more"]
    app.stream("epochal", schema="bank.Payment")

    @app.procedure(
        input="epochal", touches=lambda t: [("accounts", t["employer"])], isolation="PL2"
    )
    def below(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    with pytest.raises(DataflowError, match="'epochal' runs below PL3"):
        app.dataflow()


def test_reads_round_trip_on_the_wire() -> None:
    registry = SchemaRegistry(Settings().schema_dir)
    codec = ReadsCodec(StateCodec(spanning_app().dataflow(), registry), registry)
    reads = Reads("events", 7, 2, {("accounts", (1,)): {"balance": 3}, ("accounts", (4,)): None})
    (one,) = codec.encode(reads)
    assert codec.decode(one) == reads
    with pytest.raises(ReadsDecodeError, match="type byte"):
        codec.decode(b"D" + one[1:])
    with pytest.raises(ReadsDecodeError, match="undecodable"):
        codec.decode(one[:-3])


def test_a_batch_of_one_spanning_stream_waits_for_the_others_to_come_past_it() -> None:
    """Transfers and refunds share one id order (refunds first at one id, by name):
    refunds batch 3 joins the queue only once no transfers batch below 3 can still come
    here (one of id 2 or above, or a progress mark); till then it is reported as waiting,
    naming the stream it waits for."""
    engine = PartitionEngine(build_refunds().dataflow(), MemoryState(), 0, {})
    move = [{"seq": 0, "payer": 1, "payee": 2, "amount": 5}]
    engine.process("refunds", 3, move, ("r", 0, 0), b"r3")
    waiting = engine.spans.oldest_unadmitted()
    assert waiting is not None and waiting[:3] == ("refunds", 3, ["transfers"])
    assert not engine.spans.queue and engine.spans.holds(spanning=False)
    engine.process("transfers", 1, move, ("t", 0, 0), b"t1")  # before it: runs first
    assert engine.spans.oldest_unadmitted() is not None, "a transfers batch 2 may come"
    engine.progress("transfers", 2, ("t", 0, 1))
    assert engine.spans.oldest_unadmitted() is None and engine.spans.idle
    group = engine.take_group()
    assert [(o.stream, o.batch_id) for o in group.outputs] == [
        ("transfer_outcomes", 1), ("refund_outcomes", 3)
    ]  # fmt: skip


def test_reads_of_several_batches_travel_packed() -> None:
    """Reads for one engine go packed into as few records as fit; each comes out whole, in
    order; a lone one goes as it is, and a packed record cut short is refused."""
    registry = SchemaRegistry(Settings().schema_dir)
    codec = ReadsCodec(StateCodec(spanning_app().dataflow(), registry), registry)
    many = [Reads("events", b, 1, {("accounts", (b,)): {"balance": b}}) for b in range(1, 40)]
    records = [r for reads in many for r in codec.encode(reads)]
    packed = codec.pack(records, max_bytes=300)
    assert 1 < len(packed) < len(records) and all(len(p) <= 300 for p in packed)
    assert [r for p in packed for r in codec.decode_all(p)] == many
    assert codec.pack(records[:1]) == records[:1]
    assert codec.decode_all(records[0]) == many[:1]
    with pytest.raises(ReadsDecodeError, match="runs past the end"):
        codec.decode_all(packed[0][:-2])


def test_large_reads_travel_in_parts() -> None:
    registry = SchemaRegistry(Settings().schema_dir)
    codec = ReadsCodec(StateCodec(spanning_app().dataflow(), registry), registry)
    rows: dict[tuple[str, Key], Record | None] = {
        ("accounts", (i,)): {"balance": i} for i in range(1000)
    }
    records = codec.encode(Reads("events", 7, 2, rows), max_bytes=1000)
    assert len(records) > 5 and all(len(r) <= 1100 for r in records)
    parts = [codec.decode(r) for r in records]
    assert [(p.part, p.parts) for p in parts] == [(i, len(records)) for i in range(len(records))]
    merged: dict[tuple[str, Key], Record | None] = {}
    for p in parts:
        merged.update(p.rows)
    assert merged == rows


def test_a_queued_batch_re_sent_is_skipped_and_another_with_its_id_dead_lettered() -> None:
    engine = PartitionEngine(spanning_app().dataflow(), MemoryState(), 0, {},
                             owner=lambda key: int(key[0]) % 2)  # fmt: skip
    first = [
        {"employer": 0, "employee": 0, "amount": 5},
        {"employer": 1, "employee": 0, "amount": 1},
    ]
    assert engine.process("events", 1, first, ("ev", 0, 0), b"one") is Outcome.PROCESSED
    assert [q for q, _ in engine.spans.outbox] == [1]  # its reads went to engine 1; it waits
    waiting = engine.spans.oldest_wait()
    assert waiting is not None and waiting[:2] == (1, [1]) and waiting[2] >= 0
    assert engine.process("events", 1, first, ("ev", 0, 1), b"one") is Outcome.DUPLICATE
    assert engine.process("events", 1, [], ("ev", 0, 2), b"other") is Outcome.STALE
    group = engine.take_group()
    assert [a.reason for a in group.aborts] == ["stale_batch_id"]
    assert ("pos", "ev", 0) not in group.ws.tables.get(SYS_TABLE, {}), "nothing done: no position"


def test_reads_sent_hold_the_sender_s_own_rows_alone() -> None:
    """What an engine sends for a batch is its own keys' rows, even when the others' reads
    come in before its outbox goes out (the task sends once per poll): a Reads sharing the
    batch's growing rows would carry every participant's rows to every other."""
    engine = PartitionEngine(spanning_app().dataflow(), MemoryState(), 0, {},
                             owner=lambda key: int(key[0]) % 3)  # fmt: skip
    batch = [{"employer": 0, "employee": 0, "amount": 5},
             {"employer": 1, "employee": 0, "amount": 1},
             {"employer": 2, "employee": 0, "amount": 1}]  # fmt: skip
    engine.process("events", 1, batch, ("ev", 0, 0), b"one")
    engine.spans.receive(Reads("events", 1, 1, {("accounts", (1,)): {"balance": 7}}),
                         ("x", 0, 0))  # fmt: skip
    assert [q for q, _ in engine.spans.outbox] == [1, 2]
    for _, reads in engine.spans.outbox:
        assert reads.sender == 0 and set(reads.rows) == {("accounts", (0,))}


def test_a_completed_batch_re_sent_is_skipped() -> None:
    engine = PartitionEngine(spanning_app().dataflow(), MemoryState(), 0, {})
    batch = [{"employer": 1, "employee": 0, "amount": 5}]
    assert engine.process("events", 1, batch, ("ev", 0, 0), b"one") is Outcome.PROCESSED
    assert engine.process("events", 1, batch, ("ev", 0, 1), b"one") is Outcome.DUPLICATE
    group = engine.take_group()
    assert group.aborts == [] and group.ws.tables[SYS_TABLE][("pos", "ev", 0)] == {"value": 2}


def nested_app(**member: object) -> App:
    """withdraw, then deposit, as one nested transaction spanning partitions."""
    app = App("span-nested")
    app.stream("transfers", schema="bank.Transfer")
    app.stream("credits", schema="bank.Transfer")
    app.table("accounts", schema="bank.Account")

    @app.procedure(input="transfers", outputs=["credits"])
    def withdraw(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for t in batch:
            ctx.emit("credits", t)

    app.procedure("credits", name="deposit", **member)(lambda ctx, batch: None)  # type: ignore[arg-type]
    app.nested("transfer", ["withdraw", "deposit"],
               touches=lambda t: [("accounts", t["payer"]), ("accounts", t["payee"])])  # fmt: skip
    return app


def test_a_spanning_nested_transaction_makes_its_root_input_spanning() -> None:
    df = nested_app().dataflow()
    assert df.spanning_streams == ("transfers",)
    assert df.touches("withdraw") is not None and df.touches("deposit") is None


@pytest.mark.parametrize(
    ("member", "message"),
    [
        ({"touches": lambda t: []}, "'deposit': its input 'credits' must be a border stream"),
        ({"outputs": ["after"]}, "'deposit''s output 'after' feeds 'last', outside it"),
    ],
)
def test_the_model_refuses_what_a_spanning_nested_transaction_cannot_serve(
    member: dict[str, object], message: str
) -> None:
    app = nested_app(**member)
    if "outputs" in member:
        app.stream("after", schema="bank.Transfer")
        app.procedure("after", name="last")(lambda ctx, batch: None)
    with pytest.raises(DataflowError, match=message):
        app.dataflow()


def test_the_root_of_a_spanning_nested_transaction_reads_a_border_stream() -> None:
    app = nested_app()
    app.stream("raw", schema="bank.Transfer")
    app.decl.procedures["withdraw"] = dataclasses.replace(
        app.decl.procedures["withdraw"], input="raw"
    )
    app.procedure("raw_in", name="feed", outputs=["raw"])(lambda ctx, batch: None)
    app.stream("raw_in", schema="bank.Transfer")
    with pytest.raises(DataflowError, match="its root 'withdraw' must read a border stream"):
        app.dataflow()
