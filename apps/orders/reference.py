"""The serial reference: every event applied one at a time, in input order.

Batching cannot change this result, by the workload's definition, so the reference has no
batch size. It is the oracle the pipeline's runs and property tests are held to.
"""

from __future__ import annotations

from orders.files import Order, Restock, Shop, TopUp
from orders.result import CONFIRMED, Result, outcomes_sha256


def order_outcome(
    order: Order,
    seen: set[int],
    price: dict[int, int],
    stock: dict[int, int],
    balances: dict[int, int],
) -> str:
    """The outcome of one order against the state before it (the state is not changed)."""
    if order.order_id in seen:
        return "duplicate_order"
    if order.customer not in balances or order.item not in price or order.qty <= 0:
        return "invalid"
    if stock[order.item] < order.qty:
        return "out_of_stock"
    if balances[order.customer] < order.qty * price[order.item]:
        return "insufficient_funds"
    return CONFIRMED


def run(shop: Shop) -> Result:
    price = {i.item: i.price for i in shop.items.values()}
    stock = {i.item: i.stock for i in shop.items.values()}
    sold = dict.fromkeys(shop.items, 0)
    balances = {c.customer: c.balance for c in shop.customers.values()}
    seen: set[int] = set()
    result = Result()
    outcomes: list[tuple[int, str]] = []
    for event in shop.events:
        if isinstance(event, Order):
            outcome = order_outcome(event, seen, price, stock, balances)
            seen.add(event.order_id)
            outcomes.append((event.order_id, outcome))
            if outcome != CONFIRMED:
                result.cancelled[outcome] += 1
                continue
            cost = event.qty * price[event.item]
            stock[event.item] -= event.qty
            sold[event.item] += event.qty
            balances[event.customer] -= cost
            result.revenue += cost
            result.confirmed += 1
        elif isinstance(event, Restock):
            if event.item not in stock or event.qty <= 0:
                result.rejected_events["invalid_restock"] += 1
            else:
                stock[event.item] += event.qty
        elif isinstance(event, TopUp):
            if event.customer not in balances or event.amount <= 0:
                result.rejected_events["invalid_topup"] += 1
            else:
                balances[event.customer] += event.amount
    result.stock, result.sold, result.balances = stock, sold, balances
    result.outcomes_sha256 = outcomes_sha256(outcomes)
    return result
