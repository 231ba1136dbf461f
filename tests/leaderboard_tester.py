"""The Leaderboard fed through `txstream.testing.AppTester`: reference data, then every
vote of a votes file as one batch, as `txstream leaderboard run` sends them."""

from __future__ import annotations

from pathlib import Path

from leaderboard.reference_data import contestants, load_area_code_states
from leaderboard.votes_file import iter_batches
from txstream.testing import AppTester


def feed_leaderboard(t: AppTester, contestants_n: int, votes: Path) -> None:
    t.feed("contestant_rows", [
        {"contestant_number": n, "contestant_name": name, "num_votes": 0}
        for n, name in contestants(contestants_n).items()
    ])  # fmt: skip
    t.feed(
        "area_code_rows", [{"area_code": a, "state": s} for a, s in load_area_code_states().items()]
    )
    for batch in iter_batches(votes, 1):
        tuples = [{"vote_id": v.vote_id, "phone_number": v.phone_number,
                   "contestant_number": v.contestant_number} for v in batch.votes]  # fmt: skip
        t.feed("votes", tuples, batch.batch_id)
