"""Serial reference implementation of Leaderboard Maintenance, read straight off leaderboard.md.

It is the oracle the platform's result documents are compared with, so it shares no code with
txstream or apps/leaderboard (it even parses the votes file itself) and stays as plain as the
spec: one batch at a time, validate all of its votes, then maintain the accepted ones, then run
the removals that came due.

    python -m tests.support.reference.leaderboard_ref VOTES [--contestants N] [--threshold T] ...

prints the result document as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

Vote = tuple[int, int, int]  # vote_id, phone_number, contestant_number


def _batches(votes_path: Path | str, batch_size: int) -> Iterator[list[Vote]]:
    with open(votes_path, encoding="ascii") as f:
        lines = (line.split() for line in f)
        while batch := [(int(v), int(p), int(c)) for v, p, c in islice(lines, batch_size)]:
            yield batch


class _Leaderboard:
    def __init__(self, contestants: int, threshold: int, max_votes: int) -> None:
        self.threshold = threshold
        self.max_votes = max_votes
        self.seen_ids: set[int] = set()
        # table `votes`, grouped: current contestant -> phone numbers of its current votes
        self.votes: dict[int, list[int]] = {c: [] for c in range(1, contestants + 1)}
        self.phone_votes: Counter[int] = Counter()
        # stream `accepted_votes` (contestant of each), the trending window's input
        self.accepted: list[int] = []
        self.rejected = {"duplicate_vote_id": 0, "invalid_contestant": 0, "over_vote_limit": 0}
        self.removed: list[dict[str, int]] = []

    def run_batch(self, batch: list[Vote]) -> None:
        accepted = self.validate(batch)
        removals_due = self.maintain_leaderboard(accepted)
        for _ in range(removals_due):
            self.remove_lowest()

    def validate(self, batch: list[Vote]) -> list[int]:
        accepted = []
        for vote_id, phone, contestant in batch:
            if vote_id in self.seen_ids:
                self.rejected["duplicate_vote_id"] += 1
                continue
            self.seen_ids.add(vote_id)
            if contestant not in self.votes:
                self.rejected["invalid_contestant"] += 1
            elif self.phone_votes[phone] >= self.max_votes:
                self.rejected["over_vote_limit"] += 1
            else:
                self.votes[contestant].append(phone)
                self.phone_votes[phone] += 1
                accepted.append(contestant)
        return accepted

    def maintain_leaderboard(self, accepted: list[int]) -> int:
        removals_due = 0
        for contestant in accepted:
            self.accepted.append(contestant)
            if len(self.accepted) % self.threshold == 0:
                removals_due += 1
        return removals_due

    def remove_lowest(self) -> None:
        if len(self.votes) <= 1:
            return
        lowest = min(self.votes, key=lambda c: (len(self.votes[c]), -c))
        phones = self.votes.pop(lowest)
        self.phone_votes.subtract(phones)
        self.removed.append(
            {
                "contestant_number": lowest,
                "num_votes": len(phones),
                "at_accepted": len(self.accepted),
            }
        )

    def result(self, window: int, slide: int) -> dict[str, Any]:
        counts = {c: len(phones) for c, phones in self.votes.items()}
        slid = len(self.accepted) // slide * slide
        visible = self.accepted[max(0, slid - window) : slid]
        trending = Counter(c for c in visible if c in counts)
        return {
            "accepted": len(self.accepted),
            "rejected": dict(self.rejected),
            "contestants": [
                {"contestant_number": c, "num_votes": n} for c, n in sorted(counts.items())
            ],
            "removed": list(self.removed),
            "top3": [[c, n] for c, n in sorted(counts.items(), key=lambda cn: (-cn[1], cn[0]))[:3]],
            "bottom3": [
                [c, n] for c, n in sorted(counts.items(), key=lambda cn: (cn[1], -cn[0]))[:3]
            ],
            "trending3": [
                [c, n] for c, n in sorted(trending.items(), key=lambda cn: (-cn[1], cn[0]))[:3]
            ],
        }


def run_reference(
    votes_path: Path | str,
    contestants: int = 50,
    threshold: int = 20000,
    max_votes: int = 1,
    window: int = 100,
    slide: int = 10,
    batch_size: int = 1,
) -> dict[str, Any]:
    """The result document for a votes file, computed serially by the spec."""
    for name, value in [
        ("contestants", contestants),
        ("threshold", threshold),
        ("window", window),
        ("slide", slide),
        ("batch_size", batch_size),
    ]:
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    board = _Leaderboard(contestants, threshold, max_votes)
    for batch in _batches(votes_path, batch_size):
        board.run_batch(batch)
    return board.result(window, slide)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.reference.leaderboard_ref")
    parser.add_argument("votes", type=Path)
    parser.add_argument("--contestants", type=int, default=50)
    parser.add_argument("--threshold", type=int, default=20000)
    parser.add_argument("--max-votes", type=int, default=1)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--slide", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1)
    args = parser.parse_args()
    print(
        json.dumps(
            run_reference(
                args.votes,
                args.contestants,
                args.threshold,
                args.max_votes,
                args.window,
                args.slide,
                args.batch_size,
            ),
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
