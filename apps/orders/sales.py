"""Sales by customer and by item: a dataflow with a repartitioned edge.

The order events arrive keyed by customer. `accept` runs on the engine owning the customer:
it drops an order that customer has placed before (by order id) or whose quantity is not
positive, and counts the customer's orders and units. Its accepted orders reach `tally`
repartitioned by item (`partition_by="item"`): each goes, through `tally`'s own topic, to
the engine owning its item, which counts the item's orders and units. Counting commutes,
so the result is exact whatever the order in which parts from different engines arrive,
and `reference` computes it serially.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from txstream import App, Record, TableView, TxnContext

Counts = dict[int, tuple[int, int]]  # key -> (orders, units)


def build_app(name: str = "sales") -> App:
    app = App(name)
    events = app.stream("sales_events", schema="orders.Event", key_field="customer")
    accepted = app.stream("accepted_orders", schema="orders.Event")
    app.table("placed", schema="orders.OrderSeen")  # (customer, order id)
    app.table("customer_sales", schema="orders.Sales")
    app.table("item_sales", schema="orders.Sales")

    @app.procedure(input=events, outputs=[accepted])
    def accept(ctx: TxnContext, batch: Sequence[Record]) -> None:
        placed, sales = ctx.table("placed"), ctx.table("customer_sales")
        for event in batch:
            key = (event["customer"], event["order_id"])
            if event["kind"] != "O" or event["amount"] <= 0 or placed.get(key) is not None:
                continue
            placed.put(key, {"seq": event["seq"]})
            _count(sales, event["customer"], event["amount"])
            ctx.emit("accepted_orders", event)

    @app.procedure(input=accepted, partition_by="item")
    def tally(ctx: TxnContext, batch: Sequence[Record]) -> None:
        sales = ctx.table("item_sales")
        for order in batch:
            _count(sales, order["item"], order["amount"])

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "sales")))


def _count(sales: TableView, key: int, units: int) -> None:
    row = sales.get(key)
    orders, total = (0, 0) if row is None else (row["orders"], row["units"])
    sales.put(key, {"orders": orders + 1, "units": total + units})


def reference(events: Iterable[Record]) -> tuple[Counts, Counts]:
    """(customer sales, item sales), computed one event at a time."""
    placed: set[tuple[int, int]] = set()
    customers: Counts = {}
    items: Counts = {}
    for e in events:
        key = (e["customer"], e["order_id"])
        if e["kind"] != "O" or e["amount"] <= 0 or key in placed:
            continue
        placed.add(key)
        for counts, k in ((customers, e["customer"]), (items, e["item"])):
            orders, units = counts.get(k, (0, 0))
            counts[k] = (orders + 1, units + e["amount"])
    return customers, items
