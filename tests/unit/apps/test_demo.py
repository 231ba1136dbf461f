"""`make demo` is worth watching: its removals go on over the whole run, and three
contestants are left on the boards at the end (before, 11 of 12 were gone halfway)."""

from __future__ import annotations

from pathlib import Path

from leaderboard.dataflow import Params, build_app
from leaderboard.demo import draw_throughput, spread_threshold
from leaderboard.votegen import write_votes_file
from tests.support.leaderboard_tester import feed_leaderboard
from txstream.testing import AppTester


def test_removals_are_spread_over_the_run_and_three_contestants_stay(tmp_path: Path) -> None:
    votes, n = 3000, 12
    path = tmp_path / "votes.txt"
    write_votes_file(path, votes, contestants=n, seed=1)
    t = AppTester(build_app(Params(contestants=n, threshold=spread_threshold(votes, n))))
    feed_leaderboard(t, n, path)
    accepted = t.table("stats")[("accepted",)]["value"]
    removed = sorted(r["at_accepted"] for r in t.table("removed").values())
    assert len(t.table("contestants")) == 3
    assert len(removed) == n - 3
    assert removed[-1] >= 0.85 * accepted, (removed, accepted)


def test_the_throughput_plot_is_drawn(tmp_path: Path) -> None:
    plot = tmp_path / "demo.png"
    draw_throughput([(0.1, 100), (0.6, 900), (1.2, 2000)], plot)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
