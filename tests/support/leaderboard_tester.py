"""The Leaderboard fed through `txstream.testing.AppTester`: reference data, then every
vote of a votes file as one batch, as `txstream leaderboard run` sends them."""

from __future__ import annotations

from pathlib import Path

from leaderboard.reference_data import reference_batches
from leaderboard.votes_file import iter_batches
from txstream.testing import AppTester


def feed_leaderboard(t: AppTester, contestants_n: int, votes: Path) -> None:
    for stream, tuples in reference_batches(contestants_n).items():
        t.feed(stream, tuples)
    for batch in iter_batches(votes, 1):
        tuples = [{"vote_id": v.vote_id, "phone_number": v.phone_number,
                   "contestant_number": v.contestant_number} for v in batch.votes]  # fmt: skip
        t.feed("votes", tuples, batch.batch_id)
