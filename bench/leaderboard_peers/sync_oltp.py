"""Peer (a), the H-Store sync analog: a client drives the dataflow against PostgreSQL.

For each batch the client calls `validate`, then `maintain_leaderboard` if a vote was
accepted, then `remove_lowest` if a removal came due: each call is its own transaction
(autocommit, one statement), and the client waits for each answer before the next call.
Ordering holds because there is one client calling serially; isolation holds per procedure
only (another client could interleave between the three, which this run does not have);
durability is PostgreSQL's commit (see postgres.SETTINGS).
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from bench.leaderboard_peers.check import Measured
from bench.leaderboard_peers.sql_leaderboard import (
    MAINTAIN,
    REMOVE,
    VALIDATE,
    batch_args,
    install,
    maintain_args,
    result_document,
)
from leaderboard.dataflow import Params
from leaderboard.votes_file import iter_batches

GUARANTEES = "ACID per procedure; order by one serial client; no exactly-once needed (no stream)"


def run(dsn: str, votes: Path, params: Params, batch_size: int) -> Measured:
    install(dsn, params)
    batches = [
        (b.batch_id, [(v.vote_id, v.phone_number, v.contestant_number) for v in b.votes])
        for b in iter_batches(votes, batch_size)
    ]
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        cur = conn.cursor()
        started = time.monotonic()
        for batch_id, tuples in batches:
            accepted = cur.execute(VALIDATE, batch_args(batch_id, tuples, params)).fetchone()
            if accepted and accepted[0]:
                due = cur.execute(MAINTAIN, maintain_args(batch_id, params)).fetchone()
                if due and due[0]:
                    cur.execute(REMOVE, (batch_id,))
        elapsed = time.monotonic() - started
    return Measured(
        "client + PostgreSQL, sync OLTP (H-Store sync analog)",
        GUARANTEES,
        len(batches),
        elapsed,
        "client clock, first call to last commit",
        result_document(dsn),
    )
