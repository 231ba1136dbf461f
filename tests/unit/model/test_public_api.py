"""`import txstream` is the user API: what an app needs, each name real."""

from __future__ import annotations

from collections.abc import Sequence

import txstream
from bank.dataflow import build_app as build_bank
from txstream.runtime.inputs import Inputs


def test_the_public_api_names_what_an_app_needs() -> None:
    wanted = {"App", "TxnContext", "Record", "Stream", "Table", "Window", "TxnAbort"}
    wanted |= {"DataflowError", "ConstraintViolation", "TxClient", "fragment", "Settings"}
    assert wanted <= set(txstream.__all__)
    for name in txstream.__all__:
        assert getattr(txstream, name) is not None, name


def test_an_app_is_written_with_the_public_api_alone() -> None:
    app = txstream.App("tiny")
    words = app.stream("words", schema="leaderboard.Vote")
    app.table("counts", schema="leaderboard.Count")

    @app.procedure(input=words)
    def count(ctx: txstream.TxnContext, batch: Sequence[txstream.Record]) -> None:
        table = ctx.table("counts")
        row = table.get(1) or {"value": 0}
        table.put(1, {"value": row["value"] + len(batch)})

    assert app.dataflow().border_streams == ("words",)
    # the coordinator's requests: queries of the app's tables; decisions only come for 2PC
    assert Inputs.of(app).topics == ["tiny.words", "tiny.requests"]


def test_inputs_add_the_coordinators_topics_for_an_app_with_transactions() -> None:
    inputs = Inputs.of(build_bank())
    # and the clients' promises (BASIC transactions), which only transactions make
    assert inputs.oltp == ("bank.requests", "bank.decisions", "bank.promises")
    assert inputs.topics[-3:] == ["bank.requests", "bank.decisions", "bank.promises"]
