"""Peer (c): the workload in Quix Streams, exactly-once, state in RocksDB.

Runs in the peers venv (`.venv-peers`: Quix pins confluent-kafka < 2.13, we pin 2.16.1), so
it imports nothing of txstream. What Quix can express, and how it is expressed here:
- Quix state is scoped by message key, and the workload's tables are global, so every batch
  carries the same key on a 1-partition topic: one state for everything, no parallelism.
- There are no stored procedures, shared tables, nested transactions or triggers: the three
  procedures are fused in one stateful function, run per batch in offset order; a batch's
  effects commit with its offset and output in a Kafka transaction (processing_guarantee
  "exactly-once", commit every 100 ms like txstream's group commit).
- Quix's count windows are per key and emit per window; the trending window must drop
  removed contestants and be read at a slide boundary, so it is a list kept in state.
- The result document is answered from state when a `{"result": true}` record arrives.

    .venv-peers/bin/python quix_app.py BROKER IN_TOPIC OUT_TOPIC GROUP STATE_DIR AREA_CSV \
        CONTESTANTS THRESHOLD MAX_VOTES WINDOW SLIDE
"""

from __future__ import annotations

import csv
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported for real in main(), so the logic can be tested without Quix
    from quixstreams import State

REASONS = ("duplicate_vote_id", "invalid_contestant", "over_vote_limit")


class Leaderboard:
    """The three procedures over one Quix State (values are JSON: dict keys are strings)."""

    def __init__(
        self,
        area_csv: str,
        contestants: int,
        threshold: int,
        max_votes: int,
        window: int,
        slide: int,
    ) -> None:
        with open(area_csv, newline="") as f:
            self.states = {int(r["area_code"]): r["state"] for r in csv.DictReader(f)}
        self.contestants, self.threshold, self.max_votes = contestants, threshold, max_votes
        self.window, self.slide = window, slide

    def __call__(self, value: dict[str, Any], state: State) -> dict[str, Any]:
        if value.get("result"):
            return {"result": self.result(state)}
        if not state.exists("contestants"):
            state.set("contestants", {str(c): 0 for c in range(1, self.contestants + 1)})
        accepted = self.validate(value["votes"], state)
        due = self.maintain_leaderboard(accepted, state)
        for _ in range(due):
            self.remove_lowest(state)
        return {"batch_id": value["batch_id"], "accepted": len(accepted)}

    def validate(self, votes: list[list[int]], state: State) -> list[int]:
        current: dict[str, int] = state.get("contestants")
        rejected: dict[str, int] = state.get("rejected", dict.fromkeys(REASONS, 0))
        accepted = []
        for vote_id, phone, contestant in votes:
            if state.exists(f"seen:{vote_id}"):
                rejected["duplicate_vote_id"] += 1
                continue
            state.set(f"seen:{vote_id}", 1)
            cast = state.get(f"phone:{phone}", 0)
            if str(contestant) not in current:
                rejected["invalid_contestant"] += 1
            elif cast >= self.max_votes:
                rejected["over_vote_limit"] += 1
            else:
                state.set(f"vote:{vote_id}", [phone, self.states.get(phone // 10**7, "XX")])
                state.set(f"phone:{phone}", cast + 1)
                vote_ids = state.get(f"votes_of:{contestant}", [])
                vote_ids.append(vote_id)
                state.set(f"votes_of:{contestant}", vote_ids)
                current[str(contestant)] += 1
                accepted.append(contestant)
        state.set("contestants", current)
        state.set("rejected", rejected)
        return accepted

    def maintain_leaderboard(self, accepted: list[int], state: State) -> int:
        if not accepted:
            return 0
        a: int = state.get("accepted", 0)
        tail: list[int] = state.get("window", [])
        due = 0
        for contestant in accepted:
            a += 1
            tail.append(contestant)
            if a % self.threshold == 0:
                due += 1
        state.set("accepted", a)
        state.set("window", tail[-(self.window + self.slide) :])
        return due

    def remove_lowest(self, state: State) -> None:
        current: dict[str, int] = state.get("contestants")
        if len(current) <= 1:
            return
        lowest = min(current, key=lambda c: (current[c], -int(c)))
        for vote_id in state.get(f"votes_of:{lowest}", []):
            phone = state.get(f"vote:{vote_id}")[0]
            state.delete(f"vote:{vote_id}")
            left = state.get(f"phone:{phone}", 0) - 1
            if left > 0:
                state.set(f"phone:{phone}", left)
            else:
                state.delete(f"phone:{phone}")
        state.delete(f"votes_of:{lowest}")
        removed = state.get("removed", [])
        removed.append(
            {
                "contestant_number": int(lowest),
                "num_votes": current.pop(lowest),
                "at_accepted": state.get("accepted", 0),
            }
        )
        state.set("removed", removed)
        state.set("contestants", current)

    def result(self, state: State) -> dict[str, Any]:
        current = sorted((int(c), n) for c, n in state.get("contestants", {}).items())
        a: int = state.get("accepted", 0)
        tail: list[int] = state.get("window", [])
        slid = a // self.slide * self.slide
        first = a - len(tail) + 1  # the accepted-vote position of tail[0]
        names = {c for c, _ in current}
        counts: dict[int, int] = {}
        for pos in range(max(1, slid - self.window + 1), slid + 1):
            c = tail[pos - first]
            if c in names:
                counts[c] = counts.get(c, 0) + 1
        return {
            "accepted": a,
            "rejected": state.get("rejected", dict.fromkeys(REASONS, 0)),
            "contestants": [{"contestant_number": c, "num_votes": n} for c, n in current],
            "removed": state.get("removed", []),
            "top3": [[c, n] for c, n in sorted(current, key=lambda x: (-x[1], x[0]))[:3]],
            "bottom3": [[c, n] for c, n in sorted(current, key=lambda x: (x[1], -x[0]))[:3]],
            "trending3": [
                [c, n] for c, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:3]
            ],
        }


def main(argv: list[str]) -> None:
    broker, in_topic, out_topic, group, state_dir, area_csv, *numbers = argv
    contestants, threshold, max_votes, window, slide = map(int, numbers)
    from quixstreams import Application

    app = Application(
        broker_address=broker,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=0.1,
        state_dir=state_dir,
        loglevel="WARNING",
    )
    votes = app.topic(in_topic, value_deserializer="json")
    results = app.topic(out_topic, value_serializer="json")
    board = Leaderboard(area_csv, contestants, threshold, max_votes, window, slide)
    app.dataframe(votes).apply(board, stateful=True).to_topic(results)
    app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
