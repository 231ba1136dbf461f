"""The result document (workload spec, "Result document"), computed from committed tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from txstream import Key, Record

REJECT_REASONS = ("duplicate_vote_id", "invalid_contestant", "over_vote_limit")
Tables = Mapping[str, Mapping[Key, Record]]


def result_document(tables: Tables) -> dict[str, Any]:
    stats = tables.get("stats", {})
    contestants = sorted(
        (int(r["contestant_number"]), int(r["num_votes"]))
        for r in tables.get("contestants", {}).values()
    )
    current = {number for number, _ in contestants}
    trending = [
        (int(k[0]), int(r["value"]))
        for k, r in tables.get("trending", {}).items()
        if int(k[0]) in current
    ]
    removed = [tables["removed"][k] for k in sorted(tables.get("removed", {}))]
    return {
        "accepted": int(stats.get(("accepted",), {"value": 0})["value"]),
        "rejected": {
            reason: int(stats.get(("rejected", reason), {"value": 0})["value"])
            for reason in REJECT_REASONS
        },
        "contestants": [{"contestant_number": c, "num_votes": n} for c, n in contestants],
        "removed": [
            {
                "contestant_number": int(r["contestant_number"]),
                "num_votes": int(r["num_votes"]),
                "at_accepted": int(r["at_accepted"]),
            }
            for r in removed
        ],
        "top3": [[c, n] for c, n in sorted(contestants, key=lambda x: (-x[1], x[0]))[:3]],
        "bottom3": [[c, n] for c, n in sorted(contestants, key=lambda x: (x[1], -x[0]))[:3]],
        "trending3": [[c, n] for c, n in sorted(trending, key=lambda x: (-x[1], x[0]))[:3]],
    }
