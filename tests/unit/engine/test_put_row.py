"""`put(row)`: a table that declares `key=` takes its key from the row's own fields."""

from __future__ import annotations

from collections.abc import Sequence

from txstream import App, Record, TxnContext
from txstream.testing import AppTester


def views_app() -> App:
    app = App("views")
    app.stream("clicks", schema="x.Click")
    app.table("views", schema="x.Views", key=("site", "page"))
    app.table("loose", schema="x.Views")  # no key= declared

    @app.procedure(input="clicks")
    def count(ctx: TxnContext, batch: Sequence[Record]) -> None:
        views = ctx.table("views")
        for click in batch:
            key = (click["site"], click["page"])
            seen = views.get(key)
            n = 1 if seen is None else seen["n"] + 1
            if click.get("how") == "loose":
                ctx.table("loose").put({"site": click["site"], "page": click["page"], "n": n})
            elif click.get("how") == "no page":
                views.put({"site": click["site"], "n": n})
            elif click.get("how") == "keyed":
                views.put(key, {"site": click["site"], "page": click["page"], "n": n})
            else:
                views.put({k: v for k, v in click.items() if k != "how"} | {"n": n})

    return app


def test_put_row_takes_the_key_the_table_declares_from_the_row() -> None:
    t = AppTester(views_app(), check_schemas=False)
    t.feed("clicks", [{"site": 1, "page": "/"}, {"site": 1, "page": "/"},
                      {"site": 2, "page": "/a", "how": "keyed"}])  # fmt: skip
    assert t.table("views") == {
        (1, "/"): {"site": 1, "page": "/", "n": 2},
        (2, "/a"): {"site": 2, "page": "/a", "n": 1},
    }, "put(row) and put(key, row) write the same rows"


def test_a_row_without_its_key_fields_aborts_naming_them() -> None:
    t = AppTester(views_app(), check_schemas=False)
    t.feed("clicks", [{"site": 3, "page": "/", "how": "no page"}])
    (abort,) = t.aborts
    assert abort.reason == "bad_row"
    assert "needs the key fields ['site', 'page']; no ['page']" in abort.error
    assert t.table("views") == {}, "nothing written"


def test_a_table_without_key_fields_says_to_give_the_key() -> None:
    t = AppTester(views_app(), check_schemas=False)
    t.feed("clicks", [{"site": 1, "page": "/", "how": "loose"}])
    (abort,) = t.aborts
    assert "declares no key= fields: put(key, row)" in abort.error


def test_put_key_and_row_refuses_a_row_as_its_key() -> None:
    app = App("bad")
    app.stream("s", schema="x.S")
    app.table("t", schema="x.T", key=("k",))

    @app.procedure(input="s")
    def p(ctx: TxnContext, batch: Sequence[Record]) -> None:
        ctx.table("t").put({"k": 1}, {"k": 1})

    t = AppTester(app, check_schemas=False)
    t.feed("s", [{}])
    (abort,) = t.aborts
    assert "put(key, row) takes a key, not a row" in abort.error
