"""Peer (b), the Storm/Esper + VoltDB analog: a Faust agent calls PostgreSQL for each batch.

The agent consumes the votes topic in order (one partition, agent concurrency 1) and runs
one database transaction per batch: it claims the record's offset in table `consumed`, then
calls the procedures as the sync client does. Faust commits the Kafka offset after the
agent has finished with the record, so after the database commit.

Guarantees, as far as this architecture allows: ACID per batch (one transaction for the three
procedures); order within the one partition; exactly-once effects in the database, because
the input position commits in the same transaction as the effects and a redelivered record
(Kafka delivery is at-least-once) fails its claim and is skipped. Output to other Kafka
consumers would be at-least-once; this workload has none.

    python -m bench.leaderboard_peers.faust_pg worker   # configured by FAUST_PG_* variables
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import faust
import psycopg

from bench.leaderboard_peers.check import Measured
from bench.leaderboard_peers.peer_process import stop
from bench.leaderboard_peers.sql_leaderboard import (
    CLAIM,
    MAINTAIN,
    REMOVE,
    VALIDATE,
    batch_args,
    install,
    maintain_args,
    result_document,
)
from bench.leaderboard_peers.votes_topic import produce_votes
from leaderboard.dataflow import Params
from txstream.config import Settings
from txstream.cpus import pinning

ROOT = Path(__file__).resolve().parents[2]
GUARANTEES = "ACID per batch; order (1 partition); exactly-once in the DB (offset in the txn)"


def build_app(
    app_id: str, broker: str, topic: str, dsn: str, params: Params, datadir: str
) -> faust.App:
    app = faust.App(
        app_id,
        broker=f"kafka://{broker}",
        web_enabled=False,
        datadir=datadir,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        topic_disable_leader=True,
    )
    votes = app.topic(topic, key_type=bytes, key_serializer="raw", value_serializer="json")

    async def process(stream: faust.StreamT[Any]) -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, prepare_threshold=0)
        try:
            async for event in stream.events():
                msg, batch = event.message, event.value
                position = {"source": f"{msg.topic}/{msg.partition}", "offset": msg.offset}
                async with conn.transaction():
                    claimed = await conn.execute(CLAIM, position)
                    if claimed.rowcount == 0:
                        continue  # a redelivery: its effects are already committed
                    tuples = [tuple(v) for v in batch["votes"]]
                    cur = await conn.execute(
                        VALIDATE, batch_args(batch["batch_id"], tuples, params)
                    )
                    accepted = await cur.fetchone()
                    if accepted and accepted[0]:
                        cur = await conn.execute(MAINTAIN, maintain_args(batch["batch_id"], params))
                        due = await cur.fetchone()
                        if due and due[0]:
                            await conn.execute(REMOVE, (batch["batch_id"],))
        finally:
            await conn.close()

    app.agent(votes, name="votes", concurrency=1)(process)
    return app


def main() -> None:
    env = os.environ
    params = Params(
        **{k: int(v) for k, v in (kv.split("=") for kv in env["FAUST_PG_PARAMS"].split(","))}
    )
    app = build_app(
        env["FAUST_PG_APP"],
        env["FAUST_PG_BROKER"],
        env["FAUST_PG_TOPIC"],
        env["FAUST_PG_DSN"],
        params,
        env["FAUST_PG_DATADIR"],
    )
    app.main()


def _progress(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT coalesce(max(next_offset), 0) FROM consumed").fetchone()
    return int(row[0]) if row else 0


def run(
    settings: Settings,
    dsn: str,
    votes: Path,
    params: Params,
    batch_size: int,
    work: Path,
    timeout_s: float,
    tags: list[str],
) -> Measured:
    """Load the votes topic, start the Faust worker, and time it from its first committed
    batch to its last (worker start-up excluded), polling the database every 50 ms."""
    install(dsn, params)
    name = f"bench-faust-pg-{uuid.uuid4().hex[:8]}"
    tags.append(name)
    total = produce_votes(settings, f"{name}.votes", votes, batch_size)
    env = {
        **os.environ,
        "FAUST_PG_APP": name,
        "FAUST_PG_BROKER": settings.bootstrap_servers,
        "FAUST_PG_TOPIC": f"{name}.votes",
        "FAUST_PG_DSN": dsn,
        "FAUST_PG_DATADIR": str(work / name),
        "FAUST_PG_PARAMS": ",".join(f"{k}={v}" for k, v in vars(params).items()),
    }
    log = (work / f"{name}.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "bench.leaderboard_peers.faust_pg", "worker", "-l", "warn"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=pinning(settings.worker_cpu_set, "worker_cpus"),  # as a txstream worker's
    )
    try:
        first_n, first_t = 0, 0.0
        done, deadline = 0, time.monotonic() + timeout_s
        while done < total:
            if worker.poll() is not None:
                raise RuntimeError(f"the Faust worker exited ({worker.returncode}); see {log.name}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Faust + PostgreSQL: {done}/{total} batches in {timeout_s}s")
            done = _progress(dsn)
            if done and not first_n:
                first_n, first_t = done, time.monotonic()
            time.sleep(0.05)
        elapsed = time.monotonic() - first_t
    finally:
        stop(worker, log)
    return Measured(
        "Faust agent + PostgreSQL (Storm/Esper + VoltDB analog)",
        GUARANTEES,
        total - first_n,
        elapsed,
        "database clock, first committed batch to last (start-up excluded)",
        result_document(dsn),
    )


if __name__ == "__main__":
    main()
