"""Sales by customer and by item: a dataflow with a repartitioned edge.

The order events arrive keyed by customer. `accept` runs on the engine owning the customer:
it drops an order that customer has placed before (by order id) or whose quantity is not
positive, and counts the customer's orders and units. Its accepted orders reach `tally`
repartitioned by item (`partition_by="item"`): each goes, through `tally`'s own topic, to
the engine owning its item, which counts the item's orders and units and emits the item's
running totals. The edge is ordered: `tally` takes the parts in batch-id order, and within
a batch in the order of the engines that sent them, so the running totals are those of one
serial execution (`reference`), whatever the engines' timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from orders.records import NAMESPACE, Event, ItemTotal, OrderSeen, Sales
from txstream import App, Record, TableView, TxnContext

Counts = dict[int, tuple[int, int]]  # key -> (orders, units)


def build_app(name: str = "sales", ordered: bool = True) -> App:
    app = App(name, namespace=NAMESPACE)
    events = app.stream("sales_events", schema=Event, key_field="customer")
    accepted = app.stream("accepted_orders", schema=Event)
    totals = app.stream("item_totals", schema=ItemTotal)
    placed_orders = app.table("placed", schema=OrderSeen, key=("customer", "order_id"))
    customer_sales = app.table("customer_sales", schema=Sales, key=("customer",))
    item_sales = app.table("item_sales", schema=Sales, key=("item",))

    @app.procedure(input=events, outputs=[accepted])
    def accept(ctx: TxnContext, batch: Sequence[Record]) -> None:
        placed, sales = ctx.table(placed_orders), ctx.table(customer_sales)
        for event in batch:
            key = (event["customer"], event["order_id"])
            if event["kind"] != "O" or event["amount"] <= 0 or placed.get(key) is not None:
                continue
            placed.put(key, {"seq": event["seq"]})
            _count(sales, event["customer"], event["amount"])
            ctx.emit(accepted, event)

    @app.procedure(input=accepted, outputs=[totals], partition_by="item", ordered=ordered)
    def tally(ctx: TxnContext, batch: Sequence[Record]) -> None:
        sales = ctx.table(item_sales)
        for order in batch:
            orders, units = _count(sales, order["item"], order["amount"])
            ctx.emit(totals, {"seq": order["seq"], "item": order["item"],
                              "orders": orders, "units": units})  # fmt: skip

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ..., "ordered": true}`."""
    return build_app(str(params.get("name", "sales")), bool(params.get("ordered", True)))


def _count(sales: TableView, key: int, units: int) -> tuple[int, int]:
    row = sales.get(key)
    orders, total = (1, units) if row is None else (row["orders"] + 1, row["units"] + units)
    sales.put(key, {"orders": orders, "units": total})
    return orders, total


def reference(
    batches: Iterable[Sequence[Record]], owner: Callable[[int], int]
) -> tuple[Counts, Counts, list[Record]]:
    """(customer sales, item sales, item totals) of one serial execution: batch by batch,
    and within a batch the customers' engines (`owner(customer)`) in turn, each one's
    events in input order, as the ordered edge runs them."""
    placed: set[tuple[int, int]] = set()
    customers: Counts = {}
    items: Counts = {}
    totals: list[Record] = []
    for batch in batches:
        accepted = []
        for e in batch:
            key = (e["customer"], e["order_id"])
            if e["kind"] != "O" or e["amount"] <= 0 or key in placed:
                continue
            placed.add(key)
            _add(customers, e["customer"], e["amount"])
            accepted.append(e)
        for e in sorted(accepted, key=lambda e: owner(e["customer"])):  # stable: input order
            orders, units = _add(items, e["item"], e["amount"])
            totals.append({"seq": e["seq"], "item": e["item"], "orders": orders, "units": units})
    return customers, items, totals


def tally_runs(
    batches: Iterable[Sequence[Record]], owner: Callable[[int], int], ordered: bool = True
) -> int:
    """How many TEs `tally` runs (each emits one record of running totals): per batch, one
    per engine owning an accepted order's item when the edge is ordered (its parts run as
    one), else one per part, a (customer's engine, item's engine) pair (`owner` places a
    key)."""
    placed: set[tuple[int, int]] = set()
    total = 0
    for batch in batches:
        pairs = set()
        for e in batch:
            key = (e["customer"], e["order_id"])
            if e["kind"] == "O" and e["amount"] > 0 and key not in placed:
                placed.add(key)
                pairs.add((owner(e["customer"]) if not ordered else 0, owner(e["item"])))
        total += len(pairs)
    return total


def _add(counts: Counts, key: int, units: int) -> tuple[int, int]:
    orders, total = counts.get(key, (0, 0))
    counts[key] = (orders + 1, total + units)
    return counts[key]
