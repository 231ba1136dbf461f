"""Isolation levels of spanning procedures: what the model refuses, and what a level below
PL3 buys (the batches of one epoch send their reads without waiting for each other)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bank.stream_transfers import build_app, from_params
from txstream import App, Isolation, Record, TxnContext
from txstream.engine.epochs import EpochReads
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.writeset import WriteSet
from txstream.model.errors import DataflowError
from txstream.testing import MemoryState


def test_a_level_needs_touches() -> None:
    app = App("levels")
    app.stream("events", schema="bank.Payment")

    @app.procedure(input="events", isolation="PL2")
    def alone(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    with pytest.raises(DataflowError, match="procedure 'alone': isolation PL2 needs touches="):
        app.dataflow()


def test_a_nested_level_needs_touches() -> None:
    app = App("levels")
    app.stream("events", schema="bank.Payment")
    app.stream("mid", schema="bank.Payment")

    @app.procedure(input="events", outputs=["mid"])
    def first(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    @app.procedure(input="mid")
    def second(ctx: TxnContext, batch: Sequence[Record]) -> None: ...

    app.nested("both", [first, second], isolation="PL1")
    with pytest.raises(DataflowError, match="nested transaction 'both': isolation PL1 needs"):
        app.dataflow()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"isolation": "PL5"}, "isolation 'PL5': expected one of PL0, PL1, PL2, PL3, PL4"),
        ({"epoch": 0}, "epoch 0: expected a whole number of batches >= 1"),
        ({"epoch": True}, "epoch True: expected"),
    ],
)
def test_a_bad_level_or_epoch_is_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(DataflowError, match=message):
        App("levels").procedure(input="events", touches=lambda t: [], **kwargs)  # type: ignore[arg-type]


def test_the_transfers_factory_takes_a_level() -> None:
    df = from_params({"name": "t", "isolation": "pl2", "epoch": 4}).dataflow()
    assert df.isolation("transfer") == (Isolation.PL2, 4)
    assert build_app().dataflow().isolation("transfer") == (Isolation.PL4, 16)


def sent(isolation: Isolation) -> list[int]:
    """Engine 0 of 2 gets three batches of transfers from account 0 (its own) to account 1
    (engine 1's), in one epoch: the batch ids whose reads it has sent before any ran."""
    df = build_app(isolation=isolation, epoch=8).dataflow()
    owner = lambda key: int(key[0])  # noqa: E731  (account n lives on engine n)
    engine = PartitionEngine(df, MemoryState(), 0, {}, owner=owner)
    for b in (1, 2, 3):
        engine.process("transfers", b, [{"seq": b, "payer": 0, "payee": 1, "amount": 1}])
    return [reads.batch_id for _, reads in engine.spans.outbox]


def test_batches_of_one_epoch_send_their_reads_at_once_below_pl3() -> None:
    assert sent(Isolation.PL4) == [1]  # each waits for the one before it on account 0
    assert sent(Isolation.PL3) == [1]
    assert sent(Isolation.PL2) == [1, 2, 3]
    assert sent(Isolation.PL0) == [1, 2, 3]


def test_a_row_json_cannot_hold_is_named() -> None:
    reads = EpochReads()
    ws = WriteSet()
    ws.put("accounts", (1,), {"balance": b"\x00"})
    with pytest.raises(TypeError, match="table 'accounts' key \\(1,\\): a row written below PL3"):
        reads.keep("transfers", 0, {("accounts", (1,)): {"balance": b"\x01"}}, ws, MemoryState())
