"""Repartitioned edges in one engine: what the model refuses, and how a bad key aborts."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orders.sales import build_app
from txstream import App, Record, TxnContext
from txstream.engine.group import OutputBatch
from txstream.engine.hops import route
from txstream.model.errors import DataflowError
from txstream.testing import AppTester


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
