"""Repartitioned edges in one engine: what the model refuses, and how a bad key aborts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial

import pytest

from orders.sales import build_app
from txstream import App, Record, TxnContext
from txstream.engine.group import Outcome, OutputBatch
from txstream.engine.hops import HopInbox, route
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.routing import partition_of
from txstream.model.errors import DataflowError
from txstream.testing import AppTester, MemoryState


def two_steps(partition_by: object, recovery: str = "changelog", border: bool = False) -> App:
    app = App("hops", recovery=recovery)
    app.stream("orders", schema="orders.Event")
    app.stream("accepted", schema="orders.Event")
    app.table("item_sales", schema="orders.Sales")

    @app.procedure(input="orders", outputs=["accepted"])
    def accept(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for e in batch:
            ctx.emit("accepted", e)

    @app.procedure(input="orders" if border else "accepted", partition_by=partition_by)  # type: ignore[arg-type]
    def tally(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for e in batch:
            ctx.table("item_sales").put(e["item"], {"orders": 1, "units": e["amount"]})

    return app


def order(seq: int, item: object = 1, customer: int = 1) -> Record:
    return {
        "seq": seq,
        "kind": "O",
        "order_id": seq,
        "customer": customer,
        "item": item,
        "amount": 2,
    }


@pytest.mark.parametrize(
    ("app", "message"),
    [
        (lambda: two_steps("item", border=True), "'orders' is a border stream"),
        (lambda: two_steps(""), "partition_by must name a field or be a function"),
        (lambda: two_steps(3), "partition_by must name a field or be a function"),
        (lambda: two_steps("item", recovery="strong"), "repartitioned procedures need changelog"),
    ],
)
def test_the_model_refuses_what_a_hop_cannot_serve(app: object, message: str) -> None:
    with pytest.raises(DataflowError, match=message):
        app().dataflow()  # type: ignore[operator]


def test_a_repartitioned_procedure_cannot_be_nested() -> None:
    app = two_steps("item")
    app.nested("both", ["accept", "tally"])
    with pytest.raises(DataflowError, match="'tally': it cannot be part of a nested"):
        app.dataflow()


def test_parts_go_to_the_owner_of_each_new_key_in_tuple_order() -> None:
    proc = two_steps("item").decl.procedures["tally"]
    out = OutputBatch("accepted", 7, [order(1, item=4), order(2, item=5), order(3, item=4)])
    parts = route(proc, out, owner=lambda key: int(key[0]) % 2)
    assert [(p.hop, p.partition, p.batch_id, [t["seq"] for t in p.tuples]) for p in parts] == [
        ("tally", 0, 7, [1, 3]),
        ("tally", 1, 7, [2]),
    ]


def test_a_function_picks_the_new_key() -> None:
    t = AppTester(two_steps(lambda e: (e["item"], e["customer"])))
    t.feed("orders", [order(1, item=3, customer=4)])
    assert t.table("item_sales") == {(3,): {"orders": 1, "units": 2}}
    assert t.aborts == []


@pytest.mark.parametrize(
    ("by", "item", "reason"),
    [
        (lambda e: e["item"] if e["seq"] == 1 else e["nope"], 1, "KeyError: 'nope'"),
        ("item", 1.5, "1.5 is a float, not an int, str or tuple"),
        ("item", True, "True is a bool"),
        (
            lambda e: (e["item"], 2.5 if e["seq"] == 2 else 1),
            1,
            "key part 2.5: type float is not a key type",
        ),
    ],
)
def test_a_tuple_without_a_new_key_aborts_the_producing_te(
    by: object, item: object, reason: str
) -> None:
    t = AppTester(two_steps(by), check_schemas=False)
    t.feed("orders", [order(1), order(2, item=item)])
    assert t.table("item_sales") == {}  # nothing of the batch reached tally
    assert t.outputs("accepted") == []
    [abort] = t.aborts
    assert (abort.procedure, abort.reason) == ("accept", "partition_key")
    assert "tuple 1 of stream 'accepted' for repartitioned procedure 'tally'" in abort.error
    assert reason in abort.error


def test_the_sales_app_counts_items_where_the_tester_runs_them() -> None:
    t = AppTester(build_app())
    t.feed("sales_events", [order(1, item=3), order(2, item=3), order(1, item=3)])
    assert t.table("item_sales") == {(3,): {"orders": 2, "units": 4}}
    assert t.table("customer_sales") == {(1,): {"orders": 2, "units": 4}}


class SysDict:
    """The engine's system values, in a dict: what a committed group keeps."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, int], int] = {}

    def get(self, key: tuple[str, str, int]) -> int | None:
        return self.values.get(key)

    def set(self, key: tuple[str, str, int], value: int) -> None:
        self.values[key] = value


def inbox(sys: SysDict, senders: int = 3) -> HopInbox:
    return HopInbox("tally", senders, sys.get, sys.set)


def ran(box: HopInbox) -> list[tuple[int, list[int]]]:
    return [(b, [p.sender for p in parts]) for b, parts in box.ready()]


def test_an_ordered_inbox_runs_a_batch_once_every_sender_has_passed_it() -> None:
    box = inbox(SysDict())
    box.receive(2, 5, [order(1)], offset=0)
    assert ran(box) == []  # senders 0 and 1 have not been heard from
    box.receive(0, 4, [], offset=1)  # sender 0 passed batch 4
    box.receive(1, 7, [order(2)], offset=2)  # sender 1 is at batch 7
    assert ran(box) == []  # sender 0 may still send a part of batch 5
    assert box.waiting_for() == [0]
    assert box.position() == 0  # nothing after the oldest waiting part is committed
    box.receive(0, 5, [order(3)], offset=3)
    assert ran(box) == [(5, [0, 2])]  # batch 5, its parts in sender order
    assert box.position() == 2
    box.receive(0, 9, [], offset=4)
    box.receive(2, 8, [], offset=5)
    assert ran(box) == [(7, [1])]
    assert box.position() == 6
    assert box.frontier() == 7  # sender 1 may still send batch 8


def test_parts_read_again_after_a_restart_are_not_run_twice() -> None:
    sys = SysDict()
    box = inbox(sys, senders=2)
    box.receive(0, 3, [order(1)], offset=0)
    box.receive(1, 2, [order(2)], offset=1)
    box.receive(1, 3, [], offset=2)
    assert ran(box) == [(2, [1]), (3, [0])]
    again = inbox(sys, senders=2)  # a restart reads the topic again from its position
    again.receive(0, 3, [order(1)], offset=0)
    again.receive(1, 2, [order(2)], offset=1)
    assert ran(again) == []
    assert again.position() == 2


def chain_app() -> App:
    """accept (where the order arrives), then per_item (by item), then per_customer (by
    customer): two ordered hops in a row."""
    app = App("chain")
    app.stream("orders", schema="orders.Event")
    app.stream("by_item", schema="orders.Event")
    app.stream("by_customer", schema="orders.Event")
    app.table("item_sales", schema="orders.Sales")
    app.table("customer_sales", schema="orders.Sales")

    @app.procedure(input="orders", outputs=["by_item"])
    def accept(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for e in batch:
            ctx.emit("by_item", e)

    def count(ctx: TxnContext, table: str, key: int) -> None:
        row = ctx.table(table).get(key) or {"orders": 0, "units": 0}
        ctx.table(table).put(key, {"orders": row["orders"] + 1, "units": 0})

    @app.procedure(input="by_item", outputs=["by_customer"], partition_by="item", ordered=True)
    def per_item(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for e in batch:
            count(ctx, "item_sales", e["item"])
            ctx.emit("by_customer", e)

    @app.procedure(input="by_customer", partition_by="customer", ordered=True)
    def per_customer(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for e in batch:
            count(ctx, "customer_sales", e["customer"])

    return app


def test_a_chain_of_ordered_hops_runs_in_the_tester() -> None:
    t = AppTester(chain_app())
    t.feed("orders", [order(1, item=5, customer=6)])
    assert t.table("item_sales") == {(5,): {"orders": 1, "units": 0}}
    assert t.table("customer_sales") == {(6,): {"orders": 1, "units": 0}}


def test_an_ordered_hop_runs_once_per_batch_and_passes_on_one_part_per_engine() -> None:
    """A batch's parts from two senders run as one TE, so the next hop gets one part of the
    batch from this engine: a TE per part once sent it two, and the next hop, taking the
    second for one it had already run, dropped it."""
    owner = partial(partition_of, partitions=2)
    engine = PartitionEngine(chain_app().dataflow(), MemoryState(), 0, {}, owner=owner,
                             partitions=2)  # fmt: skip
    items = [i for i in range(20) if owner((i,)) == 0][:2]  # both owned by engine 0
    for sender, item in enumerate(items):
        engine.process_hop("per_item", sender, 1, [order(sender, item=item, customer=7)],
                           ("hop.per_item", 0, sender))  # fmt: skip
    for sender in (0, 1):
        engine.process_hop("per_item", sender, 1, [], ("hop.per_item", 0, 2 + sender))
    group = engine.take_group()
    parts = [
        (o.partition, o.batch_id) for o in group.outputs if o.hop == "per_customer" and o.tuples
    ]
    assert parts == [(owner((7,)), 1)]  # one part, with both orders
    assert group.stats.executions == 1


def test_a_chain_of_ordered_hops_across_engines_loses_no_part() -> None:
    """Two engines: the middle hop gets one batch's parts from both, and must pass them on
    as one part per batch (it once ran a TE per part, so the last hop saw two parts of one
    batch from one sender, and skipped the second as already run)."""
    owner = partial(partition_of, partitions=2)
    df = chain_app().dataflow()
    states = [MemoryState(), MemoryState()]
    engines = [PartitionEngine(df, states[p], p, {}, owner=owner, partitions=2) for p in (0, 1)]
    orders = [order(i, item=i % 4, customer=i % 3) for i in range(12)]
    offsets: dict[tuple[str, int], int] = {}
    for b, start in enumerate(range(0, 12, 4), 1):  # each batch: parts on both engines
        for p in (0, 1):
            mine = [o for o in orders[start : start + 4] if owner((o["customer"],)) == p]
            engines[p].process("orders", b, mine, ("orders", p, b))
    for p in (0, 1):
        engines[p].progress("orders", 3, ("orders", p, 99))
    for _ in range(10):  # commit every engine, deliver what its group sent, until quiet
        sent = []
        for p, engine in enumerate(engines):
            group = engine.take_group()
            states[p].apply(group)
            sent += [(p, out) for out in group.outputs if out.hop is not None]
        for sender, out in sent:
            topic = f"hop.{out.hop}"
            offset = offsets.get((topic, out.partition), 0)
            offsets[(topic, out.partition)] = offset + 1
            engines[out.partition].process_hop(
                out.hop or "", sender, out.batch_id, out.tuples, (topic, out.partition, offset)
            )
    customers = {
        k: r["orders"] for s in states for k, r in s.tables.get("customer_sales", {}).items()
    }
    want: dict[tuple[int], int] = {}
    for o in orders:
        want[(o["customer"],)] = want.get((o["customer"],), 0) + 1
    assert customers == want


def test_ordered_needs_partition_by_and_an_ordered_hop_before_it() -> None:
    app = two_steps("item")
    app.procedure("accepted", ordered=True, name="plain")(lambda ctx, batch: None)
    with pytest.raises(DataflowError, match="'plain': ordered= applies to partition_by="):
        app.dataflow()
    app = two_steps("item")  # tally: not ordered
    app.stream("after", schema="orders.Event")
    app.decl.procedures["tally"] = dataclasses.replace(
        app.decl.procedures["tally"], outputs=("after",)
    )
    app.procedure("after", partition_by="customer", ordered=True, name="last")(
        lambda ctx, batch: None
    )
    with pytest.raises(DataflowError, match="'last' is ordered, but runs behind 'tally'"):
        app.dataflow()


def test_a_progress_mark_passes_batches_and_refuses_them_after() -> None:
    """An engine with no part of batches 4..6 passes them on the producer's mark: an ordered
    hop fed from here gets a marker at 6; a batch 5 arriving after the mark is dead-lettered
    (the producer said every batch up to 6 had been sent)."""
    df = build_app().dataflow()
    state = MemoryState()
    engine = PartitionEngine(df, state, 0, {}, partitions=2)
    engine.process("sales_events", 3, [order(1)], ("in", 0, 0))
    engine.progress("sales_events", 6, ("in", 0, 1))
    group = engine.take_group()
    state.apply(group)
    markers = [(o.partition, o.batch_id) for o in group.outputs if o.hop and not o.tuples]
    assert markers == [(0, 6), (1, 6)]
    assert engine.position("in") == 2
    assert engine.process("sales_events", 5, [order(2)], ("in", 0, 2)) is Outcome.STALE
    assert [a.reason for a in engine.take_group().aborts] == ["stale_batch_id"]
