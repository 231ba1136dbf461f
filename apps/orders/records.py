"""The order pipeline's records as Python types: the same Avro records as
`schemas/orders/*.avsc` (the registry refuses a type that differs from its file, and the
warehouse job reads the files), so either form writes the same bytes. Its apps declare
with these, under the namespace `orders`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

NAMESPACE = "orders"


class Account(TypedDict):
    """One customer's account: the balance in cents."""

    customer: int
    balance: int


class Event(TypedDict):
    """One line of the events file: an order (O), a restock (R) or a top-up (T). `seq` is
    its place in the input; `amount` the order's or restock's quantity, or the top-up's
    amount."""

    seq: int
    kind: str
    order_id: NotRequired[int | None]
    customer: NotRequired[int | None]
    item: NotRequired[int | None]
    amount: int


@dataclass
class Item:
    """One item of the catalogue: its price in cents, the units in stock and sold."""

    item: int
    price: int
    stock: int
    sold: int = 0


class ItemTotal(TypedDict):
    """An item's running totals right after one accepted order (`seq`, its place in the
    input)."""

    seq: int
    item: int
    orders: int
    units: int


class OrderSeen(TypedDict):
    """An order id already seen in the input, whatever its outcome."""

    seq: int


@dataclass(kw_only=True)  # Avro's field order has a default before a field without one
class Outcome:
    """What one event did: an order's outcome (confirmed or the cancel reason), or a
    restock's or top-up's (applied, invalid_restock, invalid_topup); `revenue` is a
    confirmed order's cost."""

    seq: int
    kind: str
    order_id: int | None = None
    outcome: str
    revenue: int = 0


class Sales(TypedDict):
    """Accepted orders counted for one key (a customer, or an item): how many, and how
    many units."""

    orders: int
    units: int
