"""The Leaderboard declared with Python record types (`leaderboard.records`) is the same
app: every derived schema is its `.avsc` record (the registry checks it), and it computes
what the serial reference does."""

from __future__ import annotations

from pathlib import Path

from leaderboard.dataflow import Params, build_app
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from tests.support.leaderboard_tester import feed_leaderboard
from tests.support.reference.leaderboard_ref import run_reference
from txstream.config import default_schema_dir
from txstream.testing import AppTester


def test_the_typed_leaderboard_is_the_avsc_one(tmp_path: Path) -> None:
    params = Params(contestants=12, threshold=400, window=20, slide=5)
    typed = build_app(params, typed=True)
    assert len(typed.schemas) == 8, "every record derived"
    registry = typed.schema_registry(default_schema_dir())  # refuses a differing record
    for name in typed.schemas:
        assert str(registry.origin(name)).endswith(".avsc"), "the file stays the definition"
    plain = build_app(params)
    assert {s.name: s.schema for s in typed.decl.streams.values()} == {
        s.name: s.schema for s in plain.decl.streams.values()
    }
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 2000, contestants=params.contestants, seed=5)
    t = AppTester(typed)
    feed_leaderboard(t, params.contestants, votes)
    expected = run_reference(votes, params.contestants, params.threshold, params.max_votes,
                             params.window, params.slide, 1)  # fmt: skip
    got = result_document(t.tables())
    assert got == {k: expected[k] for k in got}
    assert t.aborts == []
