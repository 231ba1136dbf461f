"""YCSB's `usertable` and its operations, as OLTP transactions on the engines.

Each operation is one single-partition transaction on the row's owner, as a key-value
store's would be: `read` returns the whole row, `update` replaces one field (YCSB's default:
one of ten), `load` inserts rows with YCSB's default shape (ten fields of 100 characters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from txstream import App, Record, TxnContext

FIELDS = tuple(f"field{i}" for i in range(10))
FIELD_LENGTH = 100


class Row(TypedDict):
    """One row of YCSB's usertable: ten text fields (YCSB's default), keyed by a long."""

    field0: str
    field1: str
    field2: str
    field3: str
    field4: str
    field5: str
    field6: str
    field7: str
    field8: str
    field9: str


class Load(TypedDict):
    keys: list[int]


class Read(TypedDict):
    id: int


class Update(TypedDict):
    id: int
    field: str
    value: str


def row_of(key: int) -> Record:
    """The loaded row of `key`: deterministic, so both systems start from the same table."""
    return {f: f"{key}:{f}:".ljust(FIELD_LENGTH, "x") for f in FIELDS}


def build_app(name: str = "ycsb") -> App:
    app = App(name, namespace="ycsb")
    usertable = app.table("usertable", schema=Row, key=("key",))

    @app.transaction(params=Load)
    def load(ctx: TxnContext, params: Record) -> int:
        rows = ctx.table(usertable)
        for key in params["keys"]:
            rows.put(key, row_of(key))
        return len(params["keys"])

    @app.transaction(params=Read)
    def read(ctx: TxnContext, params: Record) -> Record | None:
        return ctx.table(usertable).get(params["id"])

    @app.transaction(params=Update)
    def update(ctx: TxnContext, params: Record) -> int:
        if params["field"] not in FIELDS:
            ctx.abort("no_field", f"usertable has no field {params['field']!r}")
        rows = ctx.table(usertable)
        row = rows.get(params["id"])
        if row is None:
            ctx.abort("no_row", f"no usertable row {params['id']}")
        assert row is not None
        rows.put(params["id"], {**row, params["field"]: params["value"]})
        return 1

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's and coordinator's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "ycsb")))
