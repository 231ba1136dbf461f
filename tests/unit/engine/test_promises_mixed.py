"""Promises mixed with other mechanisms on the same constrained rows, no Kafka.

Covered: a promise's deltas are what it changes in a summed field, however it wrote the
row (`put` then `add`, `add` then `put`); a promise's `put` of a row lands only the fields
it changed, over what others committed meanwhile; a promise that creates a constrained row
is alone on it until it lands; a promise's decision waits for a 2PC transaction prepared on its rows
and lands after that one's decision, also across a restart; a promise is named by its
place in the promises topic, never its client, so it cannot take a 2PC transaction's
decision.

The invariant checked throughout is the one a user relies on: each row ends equal to its
initial value plus exactly the committed transactions' changes, and the summed field's
total equals the sum of the deltas SERIALIZE admitted.
"""

from __future__ import annotations

import json
from typing import TypedDict

import pytest

from tests.support.fakes import MemoryBase
from tests.support.fakes import send as send_at
from txstream import App, Record, TxnContext
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import PROMISED_TABLE, promise_id
from txstream.oltp.messages import (
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
)

BOUND = "sum(sold) <= 60 group by show"


class Sale(TypedDict):
    show: int
    channel: int
    n: int


class Price(TypedDict):
    show: int
    channel: int
    price: int


def tickets_app() -> App:
    """Seats sold per show through channels; a show has at most 60 seats."""
    app = App("tickets")
    app.table("sales", schema="x.Sale", key=("show", "channel"), aggregates=[BOUND])

    def row(params: Record) -> Record:
        return {"show": params["show"], "channel": params["channel"], "sold": 0, "price": 10}

    @app.transaction(params=Sale)
    def open_and_sell(ctx: TxnContext, params: Record) -> int:
        """Open the channel's row (a put) and sell on it (an add)."""
        sales, key = ctx.table("sales"), (params["show"], params["channel"])
        if sales.get(key) is None:
            sales.put(key, row(params))
        return int(sales.add(key, {"sold": params["n"]})["sold"])

    @app.transaction(params=Sale)
    def sell(ctx: TxnContext, params: Record) -> int:
        return int(ctx.table("sales").add((params["show"], params["channel"]),
                                          {"sold": params["n"]})["sold"])  # fmt: skip

    @app.transaction(params=Sale)
    def sell_and_stamp(ctx: TxnContext, params: Record) -> int:
        """Sell (an add), then write the row back whole (a put of what it read)."""
        sales, key = ctx.table("sales"), (params["show"], params["channel"])
        new = sales.add(key, {"sold": params["n"]})
        sales.put(key, {**new, "price": new["price"] + 1})
        return int(new["sold"])

    @app.transaction(params=Price)
    def reprice(ctx: TxnContext, params: Record) -> int:
        sales, key = ctx.table("sales"), (params["show"], params["channel"])
        current = sales.get(key)
        assert current is not None
        sales.put(key, {**current, "price": params["price"]})
        return int(params["price"])

    @app.transaction(params=Sale)
    def open_channel(ctx: TxnContext, params: Record) -> int:
        key = (params["show"], params["channel"])
        if ctx.table("sales").get(key) is None:
            ctx.table("sales").put(key, row(params))
        return 0

    return app


def engine_over(base: MemoryBase) -> PartitionEngine:
    return PartitionEngine(tickets_app().dataflow(), base, partition=0, params={})


def send(engine: PartitionEngine, kind: str, name: str, *frags: Fragment) -> EngineReply:
    """A request at coordinator epoch 1, the epoch this file's decisions name."""
    return send_at(engine, kind, name, *frags, epoch=1)


def sale(procedure: str, show: int, channel: int, n: int) -> Fragment:
    return Fragment.call((show, channel), procedure, show=show, channel=channel, n=n)


def price(show: int, channel: int, to: int) -> Fragment:
    return Fragment.call((show, channel), "reprice", show=show, channel=channel, price=to)


def total(show: int) -> str:
    return json.dumps(["sales", BOUND, [show]])


def deltas(reply: EngineReply) -> dict[str, float]:
    return {k: v for k, v in json.loads(reply.rows)}


def opened(sold: int = 0) -> tuple[PartitionEngine, MemoryBase]:
    """Show 1, channel 1 open, with `sold` seats sold by a committed promise."""
    base = MemoryBase()
    engine = engine_over(base)
    assert send(engine, "run", "0.1", sale("open_channel", 1, 1, 0)).ok
    if sold:
        r = send(engine, "promise", "p.0", sale("sell", 1, 1, sold))
        engine.participant.decide(Decision(r.txn_id, 0, True))
    base.apply(engine.take_group())
    return engine, base


def test_a_promise_that_puts_a_row_and_adds_to_it_replies_its_deltas() -> None:
    base = MemoryBase()
    engine = engine_over(base)
    r = send(engine, "promise", "p.a", sale("open_and_sell", 1, 1, 5))
    assert r.ok and deltas(r) == {total(1): 5}, r
    engine.participant.decide(Decision(r.txn_id, 0, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 1)]["sold"] == 5


def test_a_promise_that_adds_then_puts_the_row_replies_its_deltas() -> None:
    engine, base = opened(sold=10)
    r = send(engine, "promise", "p.a", sale("sell_and_stamp", 1, 1, 3))
    assert r.ok and deltas(r) == {total(1): 3}, r
    engine.participant.decide(Decision(r.txn_id, 0, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 1)] == {"show": 1, "channel": 1, "sold": 13, "price": 11}


def test_a_promise_that_puts_a_row_lands_only_the_fields_it_changed() -> None:
    """A held promise that put a row it found lands what it changed, field by field, on
    the row as it stands at the decision: another promise's add and an ACID reprice
    committed meanwhile both stay. (Landed whole, the row as the promise computed it
    would overwrite them: a lost update.)"""
    engine, base = opened(sold=10)
    stamped = send(engine, "promise", "p.a", sale("sell_and_stamp", 1, 1, 3))  # price 10 -> 11
    added = send(engine, "promise", "p.b", sale("sell", 1, 1, 4))
    assert stamped.ok and added.ok, (stamped, added)
    assert send(engine, "run", "0.2", price(1, 1, 50)).ok  # committed at once: price 50
    engine.participant.decide(Decision(added.txn_id, 0, True))
    engine.participant.decide(Decision(stamped.txn_id, 0, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 1)] == {"show": 1, "channel": 1, "sold": 10 + 4 + 3,
                                            "price": 11}  # fmt: skip


def test_a_promise_that_creates_a_constrained_row_is_alone_on_it() -> None:
    """A created row lands whole: while it is held, no other promise may write that row,
    and the refusal names the rule and the holder."""
    engine, base = opened(sold=10)
    created = send(engine, "promise", "p.a", sale("open_and_sell", 1, 2, 3))
    assert created.ok
    r = send(engine, "promise", "p.b", sale("open_and_sell", 1, 2, 4))
    assert (r.ok, r.reason) == (False, "promised_row") and created.txn_id in r.detail, r
    engine.participant.decide(Decision(created.txn_id, 0, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 2)]["sold"] == 3


def test_formula_only_promises_on_one_row_all_land() -> None:
    engine, base = opened(sold=10)
    replies = [send(engine, "promise", f"p.{i}", sale("sell", 1, 1, i)) for i in (1, 2, 3)]
    assert all(r.ok for r in replies)
    for r in reversed(replies):
        engine.participant.decide(Decision(r.txn_id, 0, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 1)]["sold"] == 16


def test_a_decision_waits_for_a_2pc_transaction_prepared_on_its_rows() -> None:
    """The 2PC transaction read the row before the promise landed and writes it whole:
    the promise lands after that transaction's decision, on the row it left."""
    engine, base = opened(sold=10)
    promised = send(engine, "promise", "p.a", sale("sell", 1, 1, 5))
    assert promised.ok
    vote = send(engine, "prepare", "1.7", price(1, 1, 25))
    assert (vote.kind, vote.ok) == ("vote", True)
    engine.participant.decide(Decision(promised.txn_id, 0, True))
    acks = [r for r in engine.group.replies if r.kind == "ack"]
    assert acks[-1].txn_id == promised.txn_id  # its decision is taken, and acknowledged
    engine.participant.decide(Decision("1.7", 1, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 1)] == {"show": 1, "channel": 1, "sold": 15, "price": 25}
    assert base.tables[PROMISED_TABLE] == {}


def test_a_decision_waiting_for_a_2pc_transaction_survives_a_restart() -> None:
    engine, base = opened(sold=10)
    promised = send(engine, "promise", "p.a", sale("sell", 1, 1, 5))
    send(engine, "prepare", "1.7", price(1, 1, 25))
    engine.participant.decide(Decision(promised.txn_id, 0, True))
    base.apply(engine.take_group())
    fresh = engine_over(base)
    fresh.participant.load()
    fresh.participant.decide(Decision("1.7", 1, False))  # the 2PC one aborts this time
    base.apply(fresh.take_group())
    assert base.tables["sales"][(1, 1)] == {"show": 1, "channel": 1, "sold": 15, "price": 10}
    assert base.tables[PROMISED_TABLE] == {}
    # a decision repeated after the restart lands nothing twice
    fresh.participant.decide(Decision(promised.txn_id, 0, True))
    base.apply(fresh.take_group())
    assert base.tables["sales"][(1, 1)]["sold"] == 15


def test_a_promise_cannot_take_a_2pc_transactions_decision() -> None:
    """Promises are named by their place in the promises topic (the task names them so,
    whatever the client chose): the engine refuses a promise with any other name, and a
    coordinator's request with a promise's, so a decision names one kind only."""
    engine, base = opened(sold=10)
    assert send(engine, "run", "0.2", sale("open_channel", 1, 2, 0)).ok
    assert send(engine, "prepare", "1.8", price(1, 2, 30)).ok
    named = EngineRequest("1.8", 1, "promise", "r-x", "client", [sale("sell", 1, 1, 50)])
    with pytest.raises(ValueError, match=r"'1\.8'"):
        engine.participant.request(named)
    posing = EngineRequest(
        promise_id(0, 99), 1, "prepare", "r-y", "client", [sale("sell", 1, 1, 1)]
    )
    with pytest.raises(ValueError, match=r"P0\.99"):
        engine.participant.request(posing)
    engine.participant.decide(Decision("1.8", 1, True))
    base.apply(engine.take_group())
    assert base.tables["sales"][(1, 2)]["price"] == 30  # the 2PC writes landed
    assert base.tables["sales"][(1, 1)]["sold"] == 10  # and nothing else
    assert engine.participant.promises.held == {}
