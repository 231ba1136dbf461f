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


def invariants(shop: Shop, result: Result) -> list[str]:
    """The workload's invariants, checked on any result (a run's or the reference's): no
    item oversold, stock + sold equal to the initial stock plus the valid restocks, no
    negative balance, revenue equal to what the items sold are worth, and every order
    counted once. Returns what is broken (nothing, if all hold)."""
    broken = []
    restocked = dict.fromkeys(shop.items, 0)
    orders = 0
    for event in shop.events:
        if isinstance(event, Restock) and event.item in restocked and event.qty > 0:
            restocked[event.item] += event.qty
        orders += isinstance(event, Order)
    for item in shop.items.values():
        stock, sold = result.stock.get(item.item), result.sold.get(item.item)
        if stock is None or sold is None:
            broken.append(f"item {item.item} is missing from the result")
        elif stock < 0:
            broken.append(f"item {item.item} is oversold: stock {stock}")
        elif stock + sold != item.stock + restocked[item.item]:
            broken.append(
                f"item {item.item}: stock {stock} + sold {sold} != initial {item.stock} "
                f"+ restocked {restocked[item.item]}"
            )
    for customer in shop.customers:
        balance = result.balances.get(customer)
        if balance is None or balance < 0:
            broken.append(f"customer {customer} has balance {balance}")
    worth = sum(result.sold.get(i.item, 0) * i.price for i in shop.items.values())
    if result.revenue != worth:
        broken.append(f"revenue {result.revenue} != {worth}, the worth of the items sold")
    counted = result.confirmed + sum(result.cancelled.values())
    if counted != orders:
        broken.append(f"{counted} orders confirmed or cancelled, of {orders} in the input")
    return broken
