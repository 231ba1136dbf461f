"""TPC-C's five transactions as OLTP procedures, one warehouse's rows on one partition.

Every call is keyed by its warehouse, `(w,)`, so the engine owning that key holds all of
the warehouse's rows (its districts, customers, orders, stock, and a copy of the read-only
item catalogue). A New-Order with a line supplied by another warehouse is one transaction
across partitions (2PC): `new_order` at home and `remote_stock` at each supplier. So is a
Payment by a customer of another warehouse: `pay_home` and `pay_customer`.

Money is in cents and rates in basis points (exact sums for the consistency checks).
Deviations from the specification, all stated in `bench/tpcc_bench.py`: customers are
chosen by id only (not 60% by last name), the database starts with no orders, and there
are no terminals or think times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from tpcc import records
from txstream import App, Record, Table, TxnContext

DISTRICTS = 10


class LoadWarehouse(TypedDict):
    w: int
    items: int


class LoadCustomers(TypedDict):
    w: int
    d: int
    customers: int


# A New-Order line: {"i": item, "supply_w": supplying warehouse, "qty": quantity}.
Line = dict[str, int]


class NewOrder(TypedDict):
    w: int
    d: int
    c: int
    lines: list[Line]


class RemoteStock(TypedDict):
    w: int
    lines: list[Line]


class PayHome(TypedDict):
    w: int
    d: int
    amount: int


class PayCustomer(TypedDict):
    w: int
    d: int
    c: int
    amount: int


class Customer(TypedDict):
    w: int
    d: int
    c: int


class Delivery(TypedDict):
    w: int
    carrier: int


class StockLevel(TypedDict):
    w: int
    d: int
    threshold: int


def price_of(i: int) -> int:
    """An item's price in cents, 1.00 to 100.00, the same in both systems."""
    return 100 + (i * 7919) % 9901


def take_stock(row: Record, qty: int, remote: bool) -> Record:
    """The specification's stock update: below 10 left after the order, restock by 91."""
    left = row["quantity"] - qty
    return {
        **row,
        "quantity": left if left >= 10 else left + 91,
        "ytd": row["ytd"] + qty,
        "order_cnt": row["order_cnt"] + 1,
        "remote_cnt": row["remote_cnt"] + int(remote),
    }


@dataclass(frozen=True)
class Tables:
    """The app's tables, as the procedures name them."""

    warehouse: Table
    district: Table
    customer: Table
    history: Table
    item: Table
    stock: Table
    orders: Table
    new_order: Table
    order_line: Table

    @classmethod
    def declare(cls, app: App) -> Tables:
        return cls(
            warehouse=app.table("warehouse", records.Warehouse, key=("w_id",)),
            district=app.table("district", records.District, key=("w_id", "d_id")),
            customer=app.table("customer", records.Customer, key=("w_id", "d_id", "c_id")),
            history=app.table("history", records.History, key=("w_id", "d_id", "c_id", "n")),
            item=app.table("item", records.Item, key=("w_id", "i_id")),
            stock=app.table("stock", records.Stock, key=("w_id", "i_id")),
            orders=app.table("orders", records.Order, key=("w_id", "d_id", "o_id")),
            new_order=app.table("new_order", records.NewOrder, key=("w_id", "d_id", "o_id")),
            order_line=app.table(
                "order_line", records.OrderLine, key=("w_id", "d_id", "o_id", "number")
            ),
        )


def build_app(name: str = "tpcc") -> App:
    app = App(name, namespace=records.NAMESPACE)
    t = Tables.declare(app)

    @app.transaction(params=LoadWarehouse)
    def load_warehouse(ctx: TxnContext, p: Record) -> int:
        w = p["w"]
        ctx.table(t.warehouse).put(w, {"w_id": w, "tax": 100 + w % 1900, "ytd": 0})
        for d in range(1, DISTRICTS + 1):
            row = {"w_id": w, "d_id": d, "tax": 100 + (w * d) % 1900, "ytd": 0, "next_o_id": 1}
            ctx.table(t.district).put((w, d), row)
        for i in range(1, p["items"] + 1):
            ctx.table(t.item).put((w, i), {"i_id": i, "price": price_of(i), "name": f"item{i}"})
            stock = {"w_id": w, "i_id": i, "quantity": 10 + (w + i) % 91, "ytd": 0,
                     "order_cnt": 0, "remote_cnt": 0}  # fmt: skip
            ctx.table(t.stock).put((w, i), stock)
        return int(p["items"])

    @app.transaction(params=LoadCustomers)
    def load_customers(ctx: TxnContext, p: Record) -> int:
        w, d = p["w"], p["d"]
        for c in range(1, p["customers"] + 1):
            row = {"w_id": w, "d_id": d, "c_id": c, "credit": "BC" if c % 10 == 0 else "GC",
                   "discount": c % 5000, "balance": -1000, "ytd_payment": 1000,
                   "payment_cnt": 1, "delivery_cnt": 0, "last_o_id": 0}  # fmt: skip
            ctx.table(t.customer).put((w, d, c), row)
        return int(p["customers"])

    @app.transaction(params=NewOrder)
    def new_order(ctx: TxnContext, p: Record) -> int:
        """The home side: order, new-order, lines, and the home warehouse's stock."""
        w, d, c, lines = p["w"], p["d"], p["c"], p["lines"]
        districts = ctx.table(t.district)
        district = districts.get((w, d))
        customer = ctx.table(t.customer).get((w, d, c))
        if district is None or customer is None:
            ctx.abort("no_customer", f"no customer {c} in district {d} of warehouse {w}")
        assert district is not None and customer is not None
        o = district["next_o_id"]
        districts.put((w, d), {**district, "next_o_id": o + 1})
        total = 0
        for n, line in enumerate(lines, 1):
            item = ctx.table(t.item).get((w, line["i"]))
            if item is None:  # the specification's 1% of New-Orders that roll back
                ctx.abort("unused_item", f"item {line['i']} is not in the catalogue")
            assert item is not None
            if line["supply_w"] == w:
                stock = ctx.table(t.stock)
                row = stock.get((w, line["i"]))
                assert row is not None
                stock.put((w, line["i"]), take_stock(row, line["qty"], remote=False))
            amount = line["qty"] * item["price"]
            total += amount
            ctx.table(t.order_line).put((w, d, o, n), {
                "w_id": w, "d_id": d, "o_id": o, "number": n, "i_id": line["i"],
                "supply_w_id": line["supply_w"], "quantity": line["qty"], "amount": amount,
                "delivered": 0})  # fmt: skip
        all_local = int(all(line["supply_w"] == w for line in lines))
        order = {"w_id": w, "d_id": d, "o_id": o, "c_id": c, "carrier_id": 0,
                 "ol_cnt": len(lines), "all_local": all_local}  # fmt: skip
        ctx.table(t.orders).put((w, d, o), order)
        ctx.table(t.new_order).put((w, d, o), {"w_id": w, "d_id": d, "o_id": o})
        ctx.table(t.customer).put((w, d, c), {**customer, "last_o_id": o})
        return int(o)

    @app.transaction(params=RemoteStock)
    def remote_stock(ctx: TxnContext, p: Record) -> int:
        """A New-Order's lines supplied by this warehouse, for another's order."""
        stock = ctx.table(t.stock)
        for line in p["lines"]:
            row = stock.get((p["w"], line["i"]))
            if row is None:
                ctx.abort("unused_item", f"warehouse {p['w']} stocks no item {line['i']}")
            assert row is not None
            stock.put((p["w"], line["i"]), take_stock(row, line["qty"], remote=True))
        return len(p["lines"])

    @app.transaction(params=PayHome)
    def pay_home(ctx: TxnContext, p: Record) -> int:
        """A Payment's warehouse and district year-to-date."""
        w, d = p["w"], p["d"]
        warehouse, district = ctx.table(t.warehouse).get(w), ctx.table(t.district).get((w, d))
        if warehouse is None or district is None:
            ctx.abort("no_district", f"no district {d} of warehouse {w}")
        assert warehouse is not None and district is not None
        ctx.table(t.warehouse).put(w, {**warehouse, "ytd": warehouse["ytd"] + p["amount"]})
        ctx.table(t.district).put((w, d), {**district, "ytd": district["ytd"] + p["amount"]})
        return int(warehouse["ytd"] + p["amount"])

    @app.transaction(params=PayCustomer)
    def pay_customer(ctx: TxnContext, p: Record) -> int:
        """A Payment's customer (maybe of another warehouse) and its history row."""
        key = (p["w"], p["d"], p["c"])
        customer = ctx.table(t.customer).get(key)
        if customer is None:
            ctx.abort("no_customer", f"no customer {list(key)}")
        assert customer is not None
        n = customer["payment_cnt"] + 1
        ctx.table(t.customer).put(key, {**customer, "balance": customer["balance"] - p["amount"],
                                        "ytd_payment": customer["ytd_payment"] + p["amount"],
                                        "payment_cnt": n})  # fmt: skip
        history = {"w_id": p["w"], "d_id": p["d"], "c_id": p["c"], "amount": p["amount"]}
        ctx.table(t.history).put((*key, n), history)
        return int(customer["balance"] - p["amount"])

    @app.transaction(params=Customer)
    def order_status(ctx: TxnContext, p: Record) -> dict[str, Any]:
        w, d, c = p["w"], p["d"], p["c"]
        customer = ctx.table(t.customer).get((w, d, c))
        if customer is None:
            ctx.abort("no_customer", f"no customer {c} in district {d} of warehouse {w}")
        assert customer is not None
        o = customer["last_o_id"]
        lines = [row for _, row in ctx.table(t.order_line).scan((w, d, o))] if o else []
        return {"balance": customer["balance"], "o_id": o, "lines": len(lines)}

    @app.transaction(params=Delivery)
    def delivery(ctx: TxnContext, p: Record) -> int:
        """Each district's oldest undelivered order, delivered: its customer is charged."""
        w, delivered = p["w"], 0
        for d in range(1, DISTRICTS + 1):
            oldest = next(iter(ctx.table(t.new_order).scan((w, d))), None)
            if oldest is None:
                continue
            (_, _, o), _ = oldest
            ctx.table(t.new_order).delete((w, d, o))
            order = ctx.table(t.orders).get((w, d, o))
            assert order is not None
            ctx.table(t.orders).put((w, d, o), {**order, "carrier_id": p["carrier"]})
            total = 0
            for key, line in ctx.table(t.order_line).scan((w, d, o)):
                ctx.table(t.order_line).put(key, {**line, "delivered": 1})
                total += line["amount"]
            c = (w, d, order["c_id"])
            customer = ctx.table(t.customer).get(c)
            assert customer is not None
            charged = {"balance": customer["balance"] + total,
                       "delivery_cnt": customer["delivery_cnt"] + 1}  # fmt: skip
            ctx.table(t.customer).put(c, {**customer, **charged})
            delivered += 1
        return delivered

    @app.transaction(params=StockLevel)
    def stock_level(ctx: TxnContext, p: Record) -> int:
        """Distinct items of the district's last 20 orders with stock below the threshold."""
        w, d = p["w"], p["d"]
        district = ctx.table(t.district).get((w, d))
        assert district is not None
        items = set()
        for o in range(max(1, district["next_o_id"] - 20), district["next_o_id"]):
            items |= {line["i_id"] for _, line in ctx.table(t.order_line).scan((w, d, o))}
        stock = ctx.table(t.stock)
        return sum(
            1 for i in items if (row := stock.get((w, i))) and row["quantity"] < p["threshold"]
        )

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's and coordinator's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "tpcc")))
