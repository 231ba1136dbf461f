"""`txstream.testing`: an app's dataflow on the real engine, with no broker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from leaderboard.dataflow import Params, build_app
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from tests.support.leaderboard_tester import feed_leaderboard
from tests.support.reference.leaderboard_ref import run_reference
from txstream import App, DataflowError, Record, TxnContext
from txstream.testing import AppTester


def test_the_leaderboard_matches_the_reference_with_no_broker(
    tmp_path: Path, txstream_tester: Callable[..., AppTester]
) -> None:
    params = Params(contestants=12, threshold=500, window=20, slide=5)
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 3000, contestants=params.contestants, seed=11)
    t = txstream_tester(build_app(params))
    feed_leaderboard(t, params.contestants, votes)
    expected = run_reference(votes, params.contestants, params.threshold, params.max_votes,
                             params.window, params.slide, 1)  # fmt: skip
    got = result_document(t.tables())
    assert got == {k: expected[k] for k in got}
    assert got["removed"], "the case must exercise removals"
    assert t.aborts == []
    assert len(t.outputs("accepted_votes")) == t.table("stats")[("accepted",)]["value"]


def counter_app() -> App:
    """clicks -> count (window, table) -> counted."""
    app = App("clicks")
    app.stream("clicks", schema="chain.Item")
    app.stream("counted", schema="chain.Item")
    app.table("totals", schema="chain.Item")
    app.window("recent", schema="chain.Item", rows=2, slide=1)

    @app.procedure(input="clicks", outputs=["counted"], windows=["recent"])
    def count(ctx: TxnContext, batch: Sequence[Record]) -> None:
        totals = ctx.table("totals")
        for click in batch:
            row = totals.get(click["key"]) or {"key": click["key"], "value": 0}
            row["value"] += click["value"]
            totals.put(click["key"], row)
            ctx.window("recent").insert(click)
            ctx.emit("counted", row)
            if click["value"] < 0:
                ctx.abort("negative")
            if click["value"] == 13:
                totals.put(0, {"key": 0, "value": "thirteen"})  # not the schema's long

    return app


def test_outputs_tables_windows_and_aborts_are_read_back() -> None:
    t = AppTester(counter_app())
    t.feed("clicks", [{"key": 1, "value": 2}, {"key": 1, "value": 3}])
    t.feed("clicks", [{"key": 2, "value": -1}])  # aborts: no trace
    t.feed("clicks", [{"key": 2, "value": 4}])
    assert t.table("totals") == {(1,): {"key": 1, "value": 5}, (2,): {"key": 2, "value": 4}}
    assert t.outputs("counted") == [
        {"key": 1, "value": 2}, {"key": 1, "value": 5}, {"key": 2, "value": 4},
    ]  # fmt: skip
    assert [b for b, _ in t.batches("counted")] == [1, 3]
    assert [(a.procedure, a.batch_id, a.reason) for a in t.aborts] == [("count", 2, "negative")]
    assert t.window("recent") == {
        "visible": [{"key": 1, "value": 3}, {"key": 2, "value": 4}], "staged": [],
    }  # fmt: skip


def test_an_injected_abort_and_a_row_off_its_schema_abort_the_te() -> None:
    t = AppTester(counter_app())
    t.abort_next("count", "chaos")
    t.feed("clicks", [{"key": 1, "value": 1}])
    t.feed("clicks", [{"key": 1, "value": 13}])
    t.feed("clicks", [{"key": 1, "value": 1}])
    assert [(a.batch_id, a.reason) for a in t.aborts] == [(1, "chaos"), (2, "invalid_row")]
    assert "table 'totals' key (0,)" in t.aborts[1].error
    assert t.table("totals") == {(1,): {"key": 1, "value": 1}}


def test_unknown_names_are_named() -> None:
    t = AppTester(counter_app())
    with pytest.raises(DataflowError, match="no stream 'click'; it has"):
        t.feed("click", [])
    with pytest.raises(DataflowError, match="no table 'total'"):
        t.table("total")
    with pytest.raises(DataflowError, match="no procedure 'counter'"):
        t.abort_next("counter")


def test_the_guide_example(txstream_tester: Callable[..., AppTester]) -> None:
    """The example under "Testing procedures without a broker" in docs/guides/writing-an-app.md,
    run as written there."""
    guide = (Path(__file__).parents[3] / "docs/guides/writing-an-app.md").read_text()
    code = guide.split("## Testing procedures without a broker", 1)[1]
    code = code.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, object] = {"build_app": build_app, "Params": Params}
    exec(code, scope)  # our own guide's example
    test = scope["test_a_vote_for_a_known_contestant_is_accepted"]
    assert callable(test)
    test(txstream_tester)
