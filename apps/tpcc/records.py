"""TPC-C's rows as Python types: the same Avro records as `schemas/tpcc/*.avsc` (the
registry refuses a type that differs from its file), so either form writes the same bytes.
The app declares its tables with these, under the namespace `tpcc`."""

from __future__ import annotations

from typing import TypedDict

NAMESPACE = "tpcc"


class Warehouse(TypedDict):
    """A warehouse: tax in basis points, year-to-date payments in cents."""

    w_id: int
    tax: int
    ytd: int


class District(TypedDict):
    """One of a warehouse's ten districts, with its next order id."""

    w_id: int
    d_id: int
    tax: int
    ytd: int
    next_o_id: int


class Customer(TypedDict):
    """A customer of a district; money in cents, discount in basis points; last_o_id
    indexes Order-Status."""

    w_id: int
    d_id: int
    c_id: int
    credit: str
    discount: int
    balance: int
    ytd_payment: int
    payment_cnt: int
    delivery_cnt: int
    last_o_id: int


class History(TypedDict):
    """One payment, keyed by its customer and the customer's payment count."""

    w_id: int
    d_id: int
    c_id: int
    amount: int


class Item(TypedDict):
    """An item, replicated on every warehouse's partition (the catalogue is read-only)."""

    i_id: int
    price: int
    name: str


class Stock(TypedDict):
    """A warehouse's stock of an item."""

    w_id: int
    i_id: int
    quantity: int
    ytd: int
    order_cnt: int
    remote_cnt: int


class Order(TypedDict):
    """An order; carrier_id 0 until delivered."""

    w_id: int
    d_id: int
    o_id: int
    c_id: int
    carrier_id: int
    ol_cnt: int
    all_local: int


class NewOrder(TypedDict):
    """An order not delivered yet."""

    w_id: int
    d_id: int
    o_id: int


class OrderLine(TypedDict):
    """One line of an order; amount in cents, delivered 0 or 1."""

    w_id: int
    d_id: int
    o_id: int
    number: int
    i_id: int
    supply_w_id: int
    quantity: int
    amount: int
    delivered: int
