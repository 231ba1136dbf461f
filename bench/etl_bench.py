"""Warehouse ETL freshness and throughput: Kafka commit to Delta visibility, live.

    .venv/bin/python bench/etl_bench.py --votes 20000 --rate 1000
    .venv/bin/python bench/etl_bench.py --votes 8000 --rate 1000 --master spark://127.0.0.1:7077

Runs the Leaderboard on a supervised worker while votes arrive at `--rate` batches/s, with the
ETL (`txstream etl run`, Spark local mode) streaming the committed topics into a fresh
warehouse: a warm-up, a pause until the mirrors are warm, then the measured votes; with
`--steady`, the votes flow at the rate from the start, the measured ones right after the
warm-up, as a source that never pauses would send them. Once every accepted vote is in
Delta, and the mirrors' query has read the changelog to its committed end, it reads the
warehouse back with delta-rs:
each vote's freshness is the commit time of its micro-batch (`etl_commits`) minus its Kafka
record's timestamp, which the engine's producer set just before its group commit. Prints
p50/p99 freshness, landed rows/s, and a markdown row for docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import typer
from confluent_kafka import Producer
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from leaderboard import WAREHOUSE_CONFIG
from leaderboard.commits import recovered_tables, wait_for_batches
from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import iter_batches
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import send, transactional_producer_config
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.supervisor import Policy, Supervised
from txstream_etl.job import checkpoint
from txstream_etl.offsets import Offsets, parse_log_entry
from txstream_etl.warehouse import MIRRORS_QUERY

try:  # `python -m bench.etl_bench`, and the tests
    from bench.machine_info import machine, machine_text
except ModuleNotFoundError:  # `python bench/etl_bench.py`: bench/ is on sys.path, the root not
    from machine_info import machine, machine_text  # type: ignore[no-redef]

TXSTREAM = str(Path(sys.executable).with_name("txstream"))


def rows(path: Path) -> list[dict[str, Any]]:
    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        return []
    reader = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return list(pa.table(reader.read_all()).to_pylist())


def caught_up(root: Path, accepted: int, since: int) -> bool:
    """`accepted` votes are in Delta, and every micro-batch that landed one after batch
    `since` is recorded in `etl_commits`."""
    votes = [v for v in rows(root / "votes") if v["batch_id"] > since]
    recorded = {c["etl_batch"] for c in rows(root / "etl_commits") if c["query"] == "streams"}
    return len(votes) >= accepted and {v["etl_batch"] for v in votes} <= recorded


def warm(root: Path) -> bool:
    """Each query ran its first micro-batches, which pay for class loading and the JIT:
    the streams query five, the changelog query (slower) two."""
    recorded = Counter(c["query"] for c in rows(root / "etl_commits"))
    return recorded["streams"] >= 5 and recorded["changelog"] >= 2


def changelog_landed(root: Path) -> bool:
    """The changelog query recorded a micro-batch."""
    return any(c["query"] == "changelog" for c in rows(root / "etl_commits"))


def committed_ends(settings: Settings, topic: str) -> Offsets:
    """Each partition's committed end (last stable offset), as Spark's offset log writes it.

    Waits compare offsets, never record timestamps: the records of one engine commit carry
    the times they were produced, up to a millisecond or more apart."""
    admin = TopicAdmin(settings)
    return {topic: {str(p): admin.stable_end(topic, p) for p in admin.partitions(topic)}}


def offset_log(query_checkpoint: Path, done: bool = False) -> dict[int, Offsets]:
    """The end offsets of the query's micro-batches (with `done`, of those it finished) that
    Spark still keeps the logs of (its newest 100). Spark writes `offsets/<n>` before running
    micro-batch n and `commits/<n>` once it ran, after every table commit of it and its
    `etl_commits` row."""
    out = {}
    for entry in (query_checkpoint / "offsets").glob("[0-9]*"):
        if not entry.name.isdigit():
            continue
        if done and not (query_checkpoint / "commits" / entry.name).exists():
            continue
        try:
            out[int(entry.name)] = parse_log_entry(entry.read_text())
        except FileNotFoundError:  # purged by Spark since it was listed: an old one
            continue
    return out


def passes(end: Offsets, mark: Offsets) -> bool:
    """`end` reaches `mark` on every partition of it."""
    return all(
        end.get(topic, {}).get(p, 0) >= offset
        for topic, partitions in mark.items()
        for p, offset in partitions.items()
    )


def read_to(query_checkpoint: Path, ends: Offsets) -> bool:
    """The query finished a micro-batch that read every partition to `ends`."""
    return any(passes(end, ends) for end in offset_log(query_checkpoint, done=True).values())


def changelog_ages(root: Path, query_checkpoint: Path, start: Offsets) -> tuple[list[float], int]:
    """Per changelog micro-batch that read past `start` (the changelog's committed end as
    the measured votes began): the age of its oldest record when the micro-batch was
    committed (every row of it was fresher). Also how many recorded micro-batches may have
    too but are left out: older than the oldest whose offsets Spark still keeps, if that
    one read past `start`."""
    ends = offset_log(query_checkpoint)
    marks = [c for c in rows(root / "etl_commits") if c["query"] == MIRRORS_QUERY]
    ages = sorted(
        (c["committed_at"] - c["first_kafka_ts"]).total_seconds()
        for c in marks
        if c["etl_batch"] in ends and not passes(start, ends[c["etl_batch"]])
    )
    oldest_read_past = bool(ends) and not passes(start, ends[min(ends)])
    return ages, sum(c["etl_batch"] not in ends for c in marks) if oldest_read_past else 0


class Producing:
    """Vote batches from the file, paced, in one Kafka transaction per 100 ms."""

    def __init__(self, settings: Settings, app: str, votes: Path) -> None:
        self.codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("leaderboard.Vote"))
        self.topic = AppTopics(app).stream("votes")
        self.producer = Producer(transactional_producer_config(settings, f"etl-bench-{app}"))
        self.producer.init_transactions(60)
        self.batches = iter_batches(votes, 1)

    def send(self, count: int, rate: int, until: Callable[[], bool] | None = None) -> int:
        """The next `count` batches at `rate` per second, or fewer if `until()` (asked each
        second) turns true first; returns the last batch id."""
        per_tick, last, started = max(1, rate // 10), 0, time.monotonic()
        self.producer.begin_transaction()
        for i, batch in zip(range(1, count + 1), self.batches, strict=False):
            tuples = [asdict(v) for v in batch.votes]
            send(self.producer, self.topic, self.codec.encode("votes", batch.batch_id, tuples))
            last = batch.batch_id
            if i % per_tick == 0:
                self.producer.commit_transaction(60)
                if until is not None and i % rate == 0 and until():
                    return last
                time.sleep(max(0.0, started + i / rate - time.monotonic()))
                self.producer.begin_transaction()
        self.producer.commit_transaction(60)
        return last


def accepted_between(settings: Settings, app: App, first: int, last: int) -> int:
    """Accepted votes of batches first..last, from the engine's committed state."""
    votes = recovered_tables(settings, app)["votes"]
    return sum(1 for r in votes.values() if first <= r["vote_id"] <= last)


def main(
    votes: int = typer.Option(20_000, help="vote batches (1 vote each), measured"),
    rate: int = typer.Option(1000, help="batches per second offered"),
    warmup: int = typer.Option(2000, help="vote batches sent first and not measured"),
    trigger_s: float = typer.Option(1.0, help="ETL micro-batch interval"),
    timeout_s: float = typer.Option(900, help="give up after this long"),
    master: str = typer.Option(
        "", help="Spark master URL (default: the spark_master setting, local[2])"
    ),
    split_drivers: bool = typer.Option(
        False, help="the mirrors' query in a second, niced Spark driver (`etl run --split-drivers`)"
    ),
    mirrors_nice: int = typer.Option(19, help="with --split-drivers: that driver's niceness"),
    spark_read: bool = typer.Option(
        False,
        help="small facts micro-batches read by a Spark job (`etl run --spark-read`), not "
        "by the driver",
    ),
    steady: bool = typer.Option(
        False,
        help="votes flow at the rate from the start, the measured ones right after the "
        "warm-up, which lasts until each query ran its first micro-batches (at most --warmup "
        "batches: give it minutes, e.g. 300000)",
    ),
) -> None:
    settings = Settings()
    # No removals: the measured votes all stay in the engine's votes table, to count them.
    params = Params(contestants=25, threshold=10 * (votes + warmup), window=100, slide=10)
    app = build_app(params, name=f"etl-bench-{uuid.uuid4().hex[:8]}")
    worker = Supervised(
        "worker",
        [TXSTREAM, "worker", "run", "--app", "leaderboard.dataflow:from_params",
         "--params", json.dumps({**asdict(params), "name": app.name})],
        settings,
        policy=Policy(max_restarts=3, window_s=60.0),
    )  # fmt: skip
    alive = lambda: worker.supervisor.live_pid() is not None  # noqa: E731
    commits_topic, changelog = AppTopics(app.name).commits, AppTopics(app.name).changelog
    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Path(tmp) / "warehouse"
        root = warehouse / app.name
        votes_file = Path(tmp) / "votes.txt"
        # where the ETL keeps the mirrors' query's checkpoint, by its own rule
        at = settings.model_copy(update={"warehouse_uri": str(warehouse)})
        mirrors = Path(checkpoint(at, app.name, MIRRORS_QUERY))
        # S-Store's generator: some votes are rejected; the fact table gets the accepted ones.
        write_votes_file(votes_file, warmup + votes, contestants=params.contestants, seed=11)
        Loader(settings, app).load_reference_data()
        producing = Producing(settings, app.name, votes_file)
        settings.log_dir.mkdir(parents=True, exist_ok=True)
        log = (settings.log_dir / f"{app.name}-etl.log").open("wb")
        argv = [TXSTREAM, "etl", "run", "--app", app.name, "--config", str(WAREHOUSE_CONFIG),
                "--trigger-s", str(trigger_s)]  # fmt: skip
        if split_drivers:
            argv += ["--split-drivers", "--mirrors-nice", str(mirrors_nice)]
        if spark_read:
            argv.append("--spark-read")
        etl = subprocess.Popen(
            argv,
            env={
                **os.environ,
                "TXSTREAM_WAREHOUSE_URI": str(warehouse),
                "TXSTREAM_SPARK_MASTER": master or settings.spark_master,
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s

        def wait(what: str, check: Callable[[], bool]) -> None:
            while not check():
                if etl.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"the ETL stopped or timed out waiting for {what}; see {log.name}")
                time.sleep(0.5)

        try:
            worker.start()  # inside: a worker that cannot start must not leave the ETL running
            # Warm-up: Spark's first micro-batches of each query pay for class loading and JIT.
            if steady:
                ended = lambda: etl.poll() is not None or warm(root)  # noqa: E731
                first = producing.send(warmup, rate, until=ended) + 1
                if not warm(root):
                    sys.exit(f"the ETL was not warm after {warmup} batches; see {log.name}")
            else:
                first = producing.send(warmup, rate) + 1
                wait_for_batches(settings, commits_topic, {"votes": first - 1}, timeout_s, alive)
                wait("the warm-up", lambda: caught_up(root, 1, 0))
                wait("the mirrors' warm-up", lambda: changelog_landed(root))
            print(f"ETL warm; producing {votes} batches at {rate}/s", file=sys.stderr)
            measured_from = committed_ends(settings, changelog)
            last = producing.send(votes, rate)
            wait_for_batches(settings, commits_topic, {"votes": last}, timeout_s, alive)
            worker.stop()
            accepted = accepted_between(settings, app, first, last)
            wait("the measured votes", lambda: caught_up(root, accepted, first - 1))
            # The worker is gone and its engine fenced: nothing commits to the changelog now.
            ends = committed_ends(settings, changelog)
            wait(f"the mirrors to read the changelog to {ends}", lambda: read_to(mirrors, ends))
        finally:
            worker.stop()
            etl.kill()
            etl.wait(30)
        commits = {
            c["etl_batch"]: c["committed_at"]
            for c in rows(root / "etl_commits")
            if c["query"] == "streams"
        }
        landed = [v for v in rows(root / "votes") if v["batch_id"] >= first]
        ages, missed = changelog_ages(root, mirrors, measured_from)
    fresh = sorted((commits[v["etl_batch"]] - v["committed_at"]).total_seconds() for v in landed)
    micro_batches = sorted({v["etl_batch"] for v in landed})
    start = min(v["committed_at"] for v in landed)
    span = (commits[micro_batches[-1]] - start).total_seconds()
    p50, p99 = statistics.median(fresh), fresh[int(0.99 * (len(fresh) - 1))]
    m = machine()
    drivers = f", two drivers (nice {mirrors_nice})" if split_drivers else ""
    drivers += ", steady" if steady else ""
    drivers += ", Spark's read" if spark_read else ""
    print(f"machine: {machine_text(m)}")
    print(f"{len(landed)} votes in {len(micro_batches)} micro-batches over {span:.1f}s")
    print(f"freshness p50 {p50:.2f}s p99 {p99:.2f}s max {fresh[-1]:.2f}s")
    print(
        f"mirrors: {len(ages)} changelog micro-batches, oldest record's age at commit "
        f"p50 {statistics.median(ages):.2f}s max {ages[-1]:.2f}s"
    )
    if missed:
        print(f"mirrors: {missed} older micro-batches left out, their offsets no longer kept")
    print(
        f"| {date.today()} | {votes} at {rate}/s, trigger {trigger_s}s, "
        f"{master or settings.spark_master}{drivers} | {p50:.2f} | {p99:.2f} "
        f"| {statistics.median(ages):.2f} / {ages[-1]:.2f} | {len(landed) / span:,.0f} "
        f"| {len(micro_batches)} | {machine_text(m)} |"
    )


if __name__ == "__main__":
    typer.run(main)
