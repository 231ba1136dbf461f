"""Split commit, the partition's side (`engine.promises`), on the inventory app, no Kafka.

Covered: a promise runs at once, holds its writes (durably, in `__promised__`) without
locking anything, and replies its deltas to the aggregation constraint's totals; the
decision applies the held formulas to the row as it then stands, or drops them; a held
promise survives a restart; a failed promise replies its reason at once; outside a promise
a constrained field keeps its value, and inside one it changes by add() only.
"""

from __future__ import annotations

import json
from typing import TypedDict

import pytest

from inventory.dataflow import NONNEGATIVE, Site, build_app
from tests.support.fakes import MemoryBase, send
from txstream import App, Record, TxnContext
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import PROMISED_TABLE
from txstream.kafka.topics import AppTopics
from txstream.model.aggregates import parse
from txstream.model.errors import DataflowError
from txstream.oltp.messages import (
    Decision,
    EngineReply,
    Fragment,
)
from txstream_coordinator.coordinator import Coordinator


def make_engine(base: MemoryBase, partition: int = 0) -> PartitionEngine:
    return PartitionEngine(build_app().dataflow(), base, partition=partition, params={})


def units(procedure: str, item: int, site: int, qty: int) -> Fragment:
    return Fragment.call((item, site), procedure, item=item, site=site, qty=qty)


def opened(stock: int = 10) -> tuple[PartitionEngine, MemoryBase]:
    """Item 1 at site 1, with `stock` units restocked by a committed promise."""
    base = MemoryBase()
    engine = make_engine(base)
    assert send(engine, "run", "0.1", Fragment.call((1, 1), "open_site", item=1, site=1)).ok
    restock = send(engine, "promise", "p.r", units("restock", 1, 1, stock))
    assert restock.ok
    engine.participant.decide(Decision(restock.txn_id, 0, True))
    base.apply(engine.take_group())
    assert base.tables["stock"][(1, 1)]["qty"] == stock
    return engine, base


TOTAL = json.dumps(["stock", NONNEGATIVE, [1]])


def test_a_promise_holds_its_writes_and_replies_its_deltas() -> None:
    engine, _ = opened()
    r = send(engine, "promise", "p.a", units("reserve", 1, 1, 4))
    assert (r.kind, r.ok, r.results) == ("promise", True, "[6]")
    # named by its place in the promises topic (`promise_id`), not by its client
    assert r.txn_id.startswith("P0.") and r.request_id == "req-p.a"
    assert json.loads(r.rows) == [[TOTAL, -4]]
    assert "stock" not in engine.group.ws.tables  # nothing lands before SERIALIZE
    assert (r.txn_id,) in engine.group.ws.tables[PROMISED_TABLE]
    assert not engine.blocked and engine.participant.locks == {}
    # a second promise on the same row neither waits nor conflicts; it reads the row as
    # serialized, without the first (BASIC's stale read): 10 - 3, not 10 - 4 - 3
    r = send(engine, "promise", "p.b", units("reserve", 1, 1, 3))
    assert r.ok and r.results == "[7]"


def test_decisions_apply_the_formulas_to_the_row_as_it_then_stands() -> None:
    engine, base = opened()
    a = send(engine, "promise", "p.a", units("reserve", 1, 1, 4)).txn_id
    b = send(engine, "promise", "p.b", units("reserve", 1, 1, 3)).txn_id
    engine.participant.decide(Decision(b, 0, True))
    engine.participant.decide(Decision(a, 0, False))
    assert engine.group.replies[-1] == EngineReply(a, 0, "ack", True, detail="aborted")
    base.apply(engine.take_group())
    assert base.tables["stock"][(1, 1)]["qty"] == 7  # 10 - 3: the aborted 4 never landed
    assert base.tables[PROMISED_TABLE] == {}
    # a decision repeated after it was applied changes nothing, and is acknowledged
    engine.participant.decide(Decision(b, 0, True))
    assert "stock" not in engine.group.ws.tables
    assert engine.group.replies[-1].kind == "ack"


def test_a_held_promise_survives_a_restart() -> None:
    engine, base = opened()
    a = send(engine, "promise", "p.a", units("reserve", 1, 1, 4)).txn_id
    base.apply(engine.take_group())
    fresh = make_engine(base)
    fresh.participant.load()
    assert sorted(fresh.participant.promises.held) == [a]
    fresh.participant.decide(Decision(a, 0, True))
    base.apply(fresh.take_group())
    assert base.tables["stock"][(1, 1)]["qty"] == 6
    assert base.tables[PROMISED_TABLE] == {}


def test_a_failed_promise_replies_its_reason_at_once_and_holds_nothing() -> None:
    engine, _ = opened()
    r = send(engine, "promise", "p.x", units("reserve", 1, 2, 1))  # no such site row
    assert (r.kind, r.ok, r.reason) == ("promise", False, "no_row")
    r = send(engine, "promise", "p.y", units("reserve", 1, 1, 0))
    assert (r.ok, r.reason) == (False, "bad_qty")
    assert PROMISED_TABLE not in engine.group.ws.tables


def test_outside_a_promise_a_summed_field_keeps_its_value() -> None:
    engine, _ = opened()
    # a plain transaction may not change it: only SERIALIZE sees every change to the sum
    r = send(engine, "run", "0.2", units("restock", 1, 1, 5))
    assert (r.ok, r.reason) == (False, "aggregate_bound")
    assert "only promised (BASIC) transactions change it" in r.detail
    # but may create a row at 0 (open_site) ...
    assert send(engine, "run", "0.3", Fragment.call((1, 2), "open_site", item=1, site=2)).ok


def test_a_promise_changes_a_summed_field_by_add_only() -> None:
    app = build_app()

    @app.transaction(params=Site)
    def set_qty(ctx: TxnContext, params: Record) -> None:
        key = (params["item"], params["site"])
        ctx.table("stock").put(key, {"item": 1, "site": 1, "qty": 99})

    base = MemoryBase()
    engine = PartitionEngine(app.dataflow(), base, partition=0, params={})
    send(engine, "run", "0.1", Fragment.call((1, 1), "open_site", item=1, site=1))
    r = send(engine, "promise", "p.s", Fragment.call((1, 1), "set_qty", item=1, site=1))
    assert (r.ok, r.reason) == (False, "aggregate_bound")
    assert "changes it with add() only" in r.detail


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("avg(qty) <= 3", "is not of the form"),
        ("count(qty) <= 3", "is not of the form"),
        ("sum(qty) > 0", "is not of the form"),
        ("sum(qty) >= 0 group by qty", "groups by the field it sums"),
    ],
)
def test_a_bad_aggregation_constraint_is_refused_naming_it(text: str, problem: str) -> None:
    with pytest.raises(DataflowError, match=problem):
        parse("stock", text)


def test_a_constraint_reads_its_bound_and_groups() -> None:
    a = parse("stock", "SUM(qty) <= 12.5 group by item, site")
    assert (a.field, a.op, a.bound, a.group_by) == ("qty", "<=", 12.5, ("item", "site"))
    assert a.allows(12.5) and not a.allows(13)
    assert a.group_of({"item": 1, "site": 2, "qty": 0}) == [1, 2]


def test_a_base_transaction_commits_on_its_partition_at_once() -> None:
    engine, _ = opened()
    r = send(engine, "base", "p.c", Fragment.call((1, 9), "acid_restock", item=1, site=9, qty=5))
    assert (r.kind, r.ok, r.reason) == ("base", False, "no_site")  # its final status
    r = send(engine, "base", "p.d", Fragment.call((1, 1), "acid_restock", item=1, site=1, qty=5))
    assert (r.kind, r.ok, r.results) == ("base", True, "[5]")
    assert engine.group.ws.tables["acid_stock"][(1, 1)]["qty"] == 5  # no hold, no decision
    assert PROMISED_TABLE not in engine.group.ws.tables
    # nothing serializes it, so it may not change a summed field
    r = send(engine, "base", "p.e", units("reserve", 1, 1, 1))
    assert (r.ok, r.reason) == (False, "aggregate_bound")


def test_basic_lets_one_row_cross_the_bound_and_sums_show_it_for_a_moment() -> None:
    """Two documented anomalies: a row under a group-by bound may cross it alone (only the
    sum is bounded), and while decisions land on the partitions one by one a sum over the
    engines' rows may be below its bound."""
    bases = [MemoryBase(), MemoryBase()]
    engines = [make_engine(b, p) for p, b in enumerate(bases)]
    for p, e in enumerate(engines):
        assert send(e, "run", f"0.{p}", Fragment.call((1, p), "open_site", item=1, site=p)).ok
        bases[p].apply(e.take_group())
    decl = build_app().decl
    coordinator = Coordinator(2, AppTopics("inventory"), decl.transactions, bounds=decl.aggregates)
    stocked = send(engines[1], "promise", "p.in", units("restock", 1, 1, 5))
    taken = send(engines[0], "promise", "p.out", units("reserve", 1, 0, 5))
    decisions = []
    for rep, p in ((stocked, 1), (taken, 0)):
        acts = coordinator.reply(EngineReply(**{**rep.__dict__, "partition": p}), 1.0)
        assert acts.statuses[0].ok
        decisions += acts.decisions
    by_partition = dict(decisions)
    engines[0].participant.decide(by_partition[0])  # the reservation lands first
    bases[0].apply(engines[0].take_group())
    assert bases[0].tables["stock"][(1, 0)]["qty"] == -5  # the row alone is below 0

    def item_sum() -> int:
        return sum(r["qty"] for b in bases for r in b.tables["stock"].values())

    assert item_sum() == -5  # and so is the item's sum, until the restock lands on p1
    engines[1].participant.decide(by_partition[1])
    bases[1].apply(engines[1].take_group())
    assert item_sum() == 0


class Seat(TypedDict):
    flight: int
    seat: int


def seats_app() -> App:
    """Seats on flights: at most 2 booked per flight, rows of a flight on every partition."""
    app = App("seats")
    app.table("seats", schema="x.Seat", key=("flight", "seat"),
              aggregates=["count(*) <= 2 group by flight"])  # fmt: skip

    @app.transaction(params=Seat)
    def book(ctx: TxnContext, params: Record) -> None:
        ctx.table("seats").put((params["flight"], params["seat"]), dict(params))

    @app.transaction(params=Seat)
    def cancel(ctx: TxnContext, params: Record) -> None:
        ctx.table("seats").delete((params["flight"], params["seat"]))

    @app.transaction(params=Seat)
    def rebook(ctx: TxnContext, params: Record) -> None:
        key = (params["flight"], params["seat"])
        ctx.table("seats").put(key, {**dict(params), "flight": params["flight"] + 1})

    return app


def seat(procedure: str, flight: int, number: int) -> Fragment:
    return Fragment.call((flight, number), procedure, flight=flight, seat=number)


def test_a_count_changes_by_rows_a_promise_creates_or_deletes() -> None:
    base = MemoryBase()
    engine = PartitionEngine(seats_app().dataflow(), base, partition=0, params={})
    total = json.dumps(["seats", "count(*) <= 2 group by flight", [7]])
    first = send(engine, "promise", "p.1", seat("book", 7, 1))
    assert json.loads(first.rows) == [[total, 1]]
    # another promise on a row a held one writes waits for nothing: it aborts at once
    r = send(engine, "promise", "p.2", seat("book", 7, 1))
    assert (r.ok, r.reason) == (False, "promised_row") and first.txn_id in r.detail
    engine.participant.decide(Decision(first.txn_id, 0, True))
    base.apply(engine.take_group())
    third = send(engine, "promise", "p.3", seat("book", 7, 1))  # the row exists: no change
    assert third.ok and json.loads(third.rows) == []
    r = send(engine, "promise", "p.4", seat("cancel", 7, 1))
    assert (r.ok, r.reason) == (False, "promised_row")  # p.3 is still held
    engine.participant.decide(Decision(third.txn_id, 0, True))
    r = send(engine, "promise", "p.5", seat("cancel", 7, 1))
    assert json.loads(r.rows) == [[total, -1]]
    # outside a promise no row is created or deleted, and nowhere does a row change group
    r = send(engine, "run", "0.1", seat("book", 7, 2))
    assert (r.ok, r.reason) == (False, "aggregate_bound")
    assert "only promised (BASIC) transactions create or delete its rows" in r.detail
    r = send(engine, "promise", "p.6", seat("rebook", 7, 1))
    assert (r.ok, r.reason) == (False, "aggregate_bound") and "stays in its group" in r.detail


def test_serialize_bounds_a_count_across_partitions() -> None:
    app = seats_app()
    c = Coordinator(4, AppTopics("seats"), app.decl.transactions, bounds=app.decl.aggregates)
    total = json.dumps(["seats", "count(*) <= 2 group by flight", [7]])

    def booked(txn_id: str, part: int, delta: int) -> bool:
        rep = EngineReply(txn_id, part, "promise", True, rows=json.dumps([[total, delta]]),
                          request_id=txn_id, reply_to=AppTopics("seats").oltp_out)  # fmt: skip
        return c.reply(rep, 1.0).statuses[0].ok

    assert booked("p.1", 0, +1) and booked("p.2", 3, +1)
    assert not booked("p.3", 1, +1)  # a third seat on flight 7, from another partition
    assert booked("p.4", 3, -1) and booked("p.5", 1, +1)
