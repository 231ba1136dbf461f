"""Dataflow validation rejects malformed DAGs with errors that name the culprit."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from txstream import TxnContext
from txstream.model.app import App
from txstream.model.declarations import Record
from txstream.model.errors import DataflowError


def noop(ctx: TxnContext, batch: Sequence[Record]) -> None:
    return None


def chain_app() -> App:
    app = App("t")
    for s in ("a", "b", "c"):
        app.stream(s, schema="x.R")
    return app


def test_valid_chain_orders_procedures() -> None:
    app = chain_app()
    app.procedure(input="b", outputs=["c"], name="second")(noop)
    app.procedure(input="a", outputs=["b"], name="first")(noop)
    df = app.dataflow()
    assert df.order == ("first", "second")
    assert df.border_streams == ("a",)


def test_cycle_is_rejected_and_named() -> None:
    app = chain_app()
    app.procedure(input="a", outputs=["b"], name="p1")(noop)
    app.procedure(input="b", outputs=["a"], name="p2")(noop)
    with pytest.raises(DataflowError, match="cycle") as e:
        app.dataflow()
    assert "p1" in str(e.value) and "p2" in str(e.value)


def test_stream_with_two_producers_is_rejected() -> None:
    app = chain_app()
    app.procedure(input="a", outputs=["c"], name="p1")(noop)
    app.procedure(input="b", outputs=["c"], name="p2")(noop)
    with pytest.raises(DataflowError, match="'c' has two producers: 'p1' and 'p2'"):
        app.dataflow()


def test_window_used_by_two_procedures_is_rejected() -> None:
    app = chain_app()
    app.window("w", schema="x.R", rows=4, slide=2)
    app.procedure(input="a", windows=["w"], name="owner")(noop)
    app.procedure(input="b", windows=["w"], name="intruder")(noop)
    with pytest.raises(DataflowError, match="window 'w' is owned by procedure 'owner'"):
        app.dataflow()


def test_undeclared_stream_and_duplicate_names() -> None:
    app = chain_app()
    app.procedure(input="nope", name="p")(noop)
    with pytest.raises(DataflowError, match="undeclared stream 'nope'"):
        app.dataflow()
    with pytest.raises(DataflowError, match="stream 'a' is declared twice"):
        app.stream("a", schema="x.R")


def test_nested_member_must_be_triggered_inside_the_group() -> None:
    app = chain_app()
    app.procedure(input="a", outputs=["b"], name="p1")(noop)
    app.procedure(input="c", name="p3")(noop)
    app.nested("n", ["p1", "p3"])
    with pytest.raises(DataflowError, match="'p3' is not triggered from within the group"):
        app.dataflow()


def test_window_needs_exactly_one_of_rows_or_range() -> None:
    app = chain_app()
    with pytest.raises(DataflowError, match="exactly one of rows= or range="):
        app.window("w", schema="x.R", slide=1)
