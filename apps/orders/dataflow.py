"""The order pipeline written against txstream's public API.

Items, accounts and order ids are spread over the partitions by their own keys, so one
order touches (usually) three engines. `shop` is a spanning procedure: each batch of
events runs as one transaction across the engines owning the keys it names, serializable
in input order (PL4), so every event sees exactly the effects of the events before it. An
order that cannot be paid takes no stock: the outcome is decided before anything changes.
The catalogue and the accounts are loaded by ordinary per-partition procedures first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orders.records import NAMESPACE, Account, Event, Item, OrderSeen, Outcome
from txstream import App, Record, TableView, TxnContext

CONFIRMED = "confirmed"
APPLIED = "applied"


def touches(event: Record) -> Iterable[tuple[str, int]]:
    """The keys an event may read or write: its order id, item and customer."""
    kind = event["kind"]
    if kind == "O":
        return (
            ("order_ids", event["order_id"]),
            ("items", event["item"]),
            ("accounts", event["customer"]),
        )
    if kind == "R":
        return (("items", event["item"]),)
    return (("accounts", event["customer"]),)


def build_app(name: str = "orders") -> App:
    app = App(name, namespace=NAMESPACE)
    items_in = app.stream("items_in", schema=Item, key_field="item")
    accounts_in = app.stream("accounts_in", schema=Account, key_field="customer")
    events = app.stream("events", schema=Event)
    outcomes = app.stream("order_outcomes", schema=Outcome)
    items = app.table("items", schema=Item, key=("item",))
    accounts = app.table("accounts", schema=Account, key=("customer",))
    order_ids = app.table("order_ids", schema=OrderSeen, key=("order_id",))

    @app.procedure(input=items_in)
    def load_items(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(items)
        for row in batch:
            rows.put(row["item"], {**row, "sold": 0})

    @app.procedure(input=accounts_in)
    def load_accounts(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for row in batch:
            rows.put(row["customer"], row)

    @app.procedure(input=events, outputs=[outcomes], touches=touches)
    def shop(ctx: TxnContext, batch: Sequence[Record]) -> None:
        seen, stock, funds = ctx.table(order_ids), ctx.table(items), ctx.table(accounts)
        for event in batch:
            kind = event["kind"]
            if kind == "O":
                outcome, revenue = _order(event, seen, stock, funds)
            elif kind == "R":
                outcome, revenue = _restock(event, stock), 0
            else:
                outcome, revenue = _top_up(event, funds), 0
            ctx.emit(
                outcomes,
                {
                    "seq": event["seq"],
                    "kind": kind,
                    "order_id": event["order_id"],
                    "outcome": outcome,
                    "revenue": revenue,
                },
            )

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "orders")))


def _order(
    event: Record, seen: TableView, items: TableView, accounts: TableView
) -> tuple[str, int]:
    order_id, qty = event["order_id"], event["amount"]
    if seen.get(order_id) is not None:
        return "duplicate_order", 0
    seen.put(order_id, {"seq": event["seq"]})
    item, account = items.get(event["item"]), accounts.get(event["customer"])
    if item is None or account is None or qty <= 0:
        return "invalid", 0
    if item["stock"] < qty:
        return "out_of_stock", 0
    cost = qty * item["price"]
    if account["balance"] < cost:
        return "insufficient_funds", 0
    items.put(event["item"], {**item, "stock": item["stock"] - qty, "sold": item["sold"] + qty})
    accounts.put(event["customer"], {**account, "balance": account["balance"] - cost})
    return CONFIRMED, cost


def _restock(event: Record, items: TableView) -> str:
    item = items.get(event["item"])
    if item is None or event["amount"] <= 0:
        return "invalid_restock"
    items.put(event["item"], {**item, "stock": item["stock"] + event["amount"]})
    return APPLIED


def _top_up(event: Record, accounts: TableView) -> str:
    account = accounts.get(event["customer"])
    if account is None or event["amount"] <= 0:
        return "invalid_topup"
    accounts.put(event["customer"], {**account, "balance": account["balance"] + event["amount"]})
    return APPLIED
