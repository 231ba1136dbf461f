"""Stock of items at sites, and reservations that must never oversell an item.

`stock` rows, keyed (item, site), spread an item over every partition; the app declares
`sum(qty) >= 0 group by item` on them. A reservation takes units at one site:
- promised (`reserve`, sent with `TxClient.promise`): it runs on the site's partition
  alone and is acknowledged once that partition's log has it; SERIALIZE then commits it
  only if the item's total over all sites stays >= 0, and tells the client;
- through 2PC (`take` on the site's row and `claim` on the item's `available` row, which
  has a per-row constraint `qty >= 0`): the classic way to hold a global count, a round of
  votes per reservation.
The two paths keep their own tables, so one run can measure both on the same items.

Other mechanisms share the promised `stock` rows, as an app mixing them would: a promised
reservation at a price (`reserve_at`, an add then a put of the row), repricing through
ACID (`set_price`, one site, or two sites' in one 2PC transaction) and audits committed
where they run (`audit`, BASE). None may change what the rows' sums are: each row's
`qty` stays the restocks less exactly the committed reservations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from txstream import App, Record, Table, TxnContext

NONNEGATIVE = "sum(qty) >= 0 group by item"


@dataclass
class Stock:
    """One item's quantity at one site, its price there and how many audits counted it;
    rows of one item live on every partition."""

    item: int
    site: int
    qty: int
    price: int = 0
    audits: int = 0


class Available(TypedDict):
    """The 2PC path's count of an item's units not yet reserved, on the item's own
    partition."""

    item: int
    qty: int


class Site(TypedDict):
    item: int
    site: int


class Units(TypedDict):
    item: int
    site: int
    qty: int


class Priced(TypedDict):
    item: int
    site: int
    qty: int
    price: int


class Price(TypedDict):
    item: int
    site: int
    price: int


class Claim(TypedDict):
    item: int
    qty: int


def build_app(name: str = "inventory") -> App:
    app = App(name, namespace="inventory")
    stock = app.table("stock", schema=Stock, key=("item", "site"), aggregates=[NONNEGATIVE])
    acid_stock = app.table("acid_stock", schema=Stock, key=("item", "site"))
    available = app.table(
        "available",
        schema=Available,
        key=("item",),
        constraints={"qty >= 0": lambda row: row["qty"] >= 0},
    )

    @app.transaction(params=Site)
    def open_site(ctx: TxnContext, params: Record) -> int:
        """A site's rows, empty (a row under an aggregation constraint starts at 0)."""
        key = (params["item"], params["site"])
        row = {"item": params["item"], "site": params["site"], "qty": 0, "price": 0, "audits": 0}
        for table in (stock, acid_stock):
            if ctx.table(table).get(key) is None:
                ctx.table(table).put(key, row)
        return 1

    @app.transaction(params=Units)
    def restock(ctx: TxnContext, params: Record) -> int:
        """Promised: units arrive at a site."""
        row = ctx.table(stock).add(_site_key(params), {"qty": params["qty"]})
        return int(row["qty"])

    @app.transaction(params=Units)
    def reserve(ctx: TxnContext, params: Record) -> int:
        """Promised: take units at a site; the site's row may go below 0, the item's
        total over all sites may not (checked when serialized)."""
        if params["qty"] <= 0:
            ctx.abort("bad_qty", f"reserve {params['qty']} units: give a positive number")
        key = (params["item"], params["site"])
        row = ctx.table(stock).add(key, {"qty": -params["qty"]})
        return int(row["qty"])

    @app.transaction(params=Priced)
    def reserve_at(ctx: TxnContext, params: Record) -> int:
        """Promised: take units at a site at a price, which becomes the site's price (a put
        after the add: it lands as the fields it changed, on the row as it then stands)."""
        if params["qty"] <= 0:
            ctx.abort("bad_qty", f"reserve {params['qty']} units: give a positive number")
        rows, key = ctx.table(stock), _site_key(params)
        row = rows.add(key, {"qty": -params["qty"]})
        rows.put(key, {**row, "price": params["price"]})
        return int(row["qty"])

    @app.transaction(params=Price)
    def set_price(ctx: TxnContext, params: Record) -> int:
        """ACID: a site's price (two sites' in one call are one 2PC transaction); the row is
        read and written whole, its quantity as it stands."""
        row = _existing(ctx, stock, params)
        ctx.table(stock).put(_site_key(params), {**row, "price": params["price"]})
        return int(row["qty"])

    @app.transaction(params=Site)
    def audit(ctx: TxnContext, params: Record) -> int:
        """BASE: count the site once more, committed on its partition when it runs."""
        row = _existing(ctx, stock, params)
        ctx.table(stock).put(_site_key(params), {**row, "audits": row["audits"] + 1})
        return int(row["qty"])

    @app.transaction(params=Units)
    def acid_restock(ctx: TxnContext, params: Record) -> int:
        """2PC path: units arrive at a site (this fragment) ..."""
        return _site(ctx, acid_stock, params, +params["qty"])

    @app.transaction(params=Claim)
    def release(ctx: TxnContext, params: Record) -> int:
        """... and count as available on the item's partition (the other fragment)."""
        return _available(ctx, available, params, +params["qty"])

    @app.transaction(params=Units)
    def take(ctx: TxnContext, params: Record) -> int:
        """2PC path: take units at a site ..."""
        return _site(ctx, acid_stock, params, -params["qty"])

    @app.transaction(params=Claim)
    def claim(ctx: TxnContext, params: Record) -> int:
        """... and claim them from the item's available count, which may not go below 0."""
        return _available(ctx, available, params, -params["qty"])

    return app


def _site(ctx: TxnContext, acid_stock: Table, params: Record, units: int) -> int:
    """The 2PC path's site row, `units` more (or fewer); its new quantity."""
    row = _existing(ctx, acid_stock, params)
    ctx.table(acid_stock).put(_site_key(params), {**row, "qty": row["qty"] + units})
    return int(row["qty"] + units)


def _existing(ctx: TxnContext, table: Table, params: Record) -> Record:
    """The site's row of `table`; the transaction aborts `no_site` if there is none."""
    row = ctx.table(table).get(_site_key(params))
    if row is None:
        ctx.abort("no_site", f"item {params['item']} has no site {params['site']}")
    assert row is not None
    return row


def _available(ctx: TxnContext, available: Table, params: Record, units: int) -> int:
    """The 2PC path's count of an item's units not reserved, `units` more or fewer; the
    table's constraint aborts it below 0."""
    rows = ctx.table(available)
    row = rows.get(params["item"]) or {"item": params["item"], "qty": 0}
    rows.put(params["item"], {**row, "qty": row["qty"] + units})
    return int(row["qty"] + units)


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's and coordinator's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "inventory")))


def _site_key(params: Record) -> tuple[int, int]:
    return (params["item"], params["site"])
