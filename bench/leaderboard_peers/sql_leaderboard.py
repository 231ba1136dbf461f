"""The workload in PostgreSQL: schema and procedures (`leaderboard.sql`), reference data, the
three procedure calls, and the result document read back with SQL.

Shared by the two database peers so that they differ only in who drives the procedures: a
client (sync OLTP) or a stream processor (Faust).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from leaderboard.dataflow import Params
from leaderboard.reference_data import contestants, load_area_code_states

SCHEMA = Path(__file__).with_name("leaderboard.sql")
VALIDATE = "SELECT validate(%s, %s, %s, %s, %s)"
MAINTAIN = "SELECT maintain_leaderboard(%s, %s, %s, %s)"
REMOVE = "SELECT remove_lowest(%s)"
# The stream processor's input position: claims `offset` (and fails to, on a redelivery).
CLAIM = (
    "INSERT INTO consumed VALUES (%(source)s, %(offset)s + 1) ON CONFLICT (source) DO UPDATE "
    "SET next_offset = excluded.next_offset WHERE consumed.next_offset <= %(offset)s"
)
REJECT_REASONS = ("duplicate_vote_id", "invalid_contestant", "over_vote_limit")

Vote = tuple[int, int, int]  # vote_id, phone_number, contestant_number


def install(dsn: str, params: Params) -> None:
    """A fresh database: schema, procedures and reference data (contestants, area codes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute(SCHEMA.read_text())
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO contestants (contestant_number, contestant_name) VALUES (%s, %s)",
                list(contestants(params.contestants).items()),
            )
            cur.executemany(
                "INSERT INTO area_code_state VALUES (%s, %s)",
                list(load_area_code_states().items()),
            )
        conn.execute("ANALYZE")


def batch_args(batch_id: int, votes: list[Vote], params: Params) -> tuple[Any, ...]:
    """validate's arguments: the batch as three arrays."""
    return (
        batch_id,
        [v[0] for v in votes],
        [v[1] for v in votes],
        [v[2] for v in votes],
        params.max_votes,
    )


def maintain_args(batch_id: int, params: Params) -> tuple[int, int, int, int]:
    return (batch_id, params.window, params.slide, params.threshold)


def result_document(dsn: str) -> dict[str, Any]:
    """The workload's result document, from the committed tables."""
    with psycopg.connect(dsn) as conn:
        counters: dict[str, int] = dict(conn.execute("SELECT name, value FROM counters").fetchall())
        current = conn.execute(
            "SELECT contestant_number, num_votes FROM contestants ORDER BY 1"
        ).fetchall()
        removed = conn.execute(
            "SELECT contestant_number, num_votes, at_accepted FROM removed ORDER BY seq"
        ).fetchall()
        trending = conn.execute(
            "SELECT t.contestant_number, t.num_votes FROM trending t "
            "JOIN contestants c USING (contestant_number)"
        ).fetchall()
    return {
        "accepted": int(counters["accepted"]),
        "rejected": {r: int(counters[r]) for r in REJECT_REASONS},
        "contestants": [{"contestant_number": c, "num_votes": n} for c, n in current],
        "removed": [
            {"contestant_number": c, "num_votes": n, "at_accepted": a} for c, n, a in removed
        ],
        "top3": [[c, n] for c, n in sorted(current, key=lambda x: (-x[1], x[0]))[:3]],
        "bottom3": [[c, n] for c, n in sorted(current, key=lambda x: (x[1], -x[0]))[:3]],
        "trending3": [[c, n] for c, n in sorted(trending, key=lambda x: (-x[1], x[0]))[:3]],
    }
