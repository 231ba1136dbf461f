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

from txstream import App, Record, TxnContext

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
    app = App(name)
    items_in = app.stream("items_in", schema="orders.Item", key_field="item")
    accounts_in = app.stream("accounts_in", schema="orders.Account", key_field="customer")
    events = app.stream("events", schema="orders.Event")
    outcomes = app.stream("order_outcomes", schema="orders.Outcome")
    app.table("items", schema="orders.Item", key=("item",))
    app.table("accounts", schema="orders.Account", key=("customer",))
    app.table("order_ids", schema="orders.OrderSeen", key=("order_id",))

    @app.procedure(input=items_in)
    def load_items(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for row in batch:
            ctx.table("items").put(row["item"], {**row, "sold": 0})

    @app.procedure(input=accounts_in)
    def load_accounts(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for row in batch:
            ctx.table("accounts").put(row["customer"], row)

    @app.procedure(input=events, outputs=[outcomes], touches=touches)
    def shop(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for event in batch:
            kind = event["kind"]
            if kind == "O":
                outcome, revenue = _order(ctx, event)
            elif kind == "R":
                outcome, revenue = _restock(ctx, event), 0
            else:
                outcome, revenue = _top_up(ctx, event), 0
            ctx.emit(
                "order_outcomes",
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


def _order(ctx: TxnContext, event: Record) -> tuple[str, int]:
    seen, items, accounts = ctx.table("order_ids"), ctx.table("items"), ctx.table("accounts")
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


def _restock(ctx: TxnContext, event: Record) -> str:
    items = ctx.table("items")
    item = items.get(event["item"])
    if item is None or event["amount"] <= 0:
        return "invalid_restock"
    items.put(event["item"], {**item, "stock": item["stock"] + event["amount"]})
    return APPLIED


def _top_up(ctx: TxnContext, event: Record) -> str:
    accounts = ctx.table("accounts")
    account = accounts.get(event["customer"])
    if account is None or event["amount"] <= 0:
        return "invalid_topup"
    accounts.put(event["customer"], {**account, "balance": account["balance"] + event["amount"]})
    return APPLIED
