"""`txstream.TxnContext` is a Protocol of what a procedure may do, and the engine's context
is one (checked by mypy, which `make lint` runs over this file): a typed app reaches
nothing else."""

from __future__ import annotations

import inspect

from txstream import TableView, TxnContext, WindowView
from txstream.engine.context import TeContext, TeTable, TeWindow


def _engine_context_is_a_txn_context(ctx: TeContext) -> TxnContext:
    return ctx  # mypy: TeContext must satisfy the Protocol


def _engine_views_are_views(table: TeTable, window: TeWindow) -> tuple[TableView, WindowView]:
    return table, window


def public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_the_context_offers_only_the_documented_calls() -> None:
    assert public(TxnContext) == {"abort", "batch_id", "emit", "params", "table", "window"}
    assert public(TableView) == {"add", "append", "delete", "get", "max", "put", "scan"}
    assert public(WindowView) == {"insert", "staged", "visible", "visible_column"}
    for name in public(TxnContext):
        assert inspect.getdoc(getattr(TxnContext, name)), f"TxnContext.{name} has a docstring"
    assert "ws" not in public(TxnContext) and "basic" not in public(TxnContext)
