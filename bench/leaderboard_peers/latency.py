"""txstream's end-to-end latency at 25%, 50% and 75% of the throughput it just reached.

For each level a fresh app and worker (as `txstream leaderboard run` starts them) get votes
at a paced rate from a plain idempotent producer, one batch per record. A batch's latency
runs from its send to the moment a read_committed consumer sees the commit notice that
covers it: the batch's effects, outputs and input position are then committed and visible.
The first WARMUP_S seconds of sends are left out of the percentiles.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from matplotlib.figure import Figure

from bench.leaderboard_peers.raw_batches import codecs_of
from leaderboard.commits import wait_for_batches
from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import iter_batches
from txstream.config import Settings
from txstream.kafka.clients import (
    idempotent_producer_config,
    read_committed_consumer_config,
    send,
)
from txstream.kafka.topics import AppTopics
from txstream.runtime.gc_freeze import freeze_startup_objects
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.supervisor import Policy, Supervised

FRACTIONS = (0.25, 0.50, 0.75)
# Batches sent in the first second are not counted: the worker's consumer wakes from idle
# (fetch back-off) and the first group commits are slower; they would dominate p99.
WARMUP_S = 1.0
SEND_TICK_S = 0.002


@dataclass(frozen=True)
class Level:
    fraction: float  # of the maximum the offered rate was derived from
    target_rate: float
    achieved_rate: float
    batches: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    system: str = "txstream"


def _worker(settings: Settings, app_name: str, params: Params) -> Supervised:
    argv = [
        str(Path(sys.executable).with_name("txstream")),
        "worker",
        "run",
        "--app",
        "leaderboard.dataflow:from_params",
        "--params",
        json.dumps({**dataclasses.asdict(params), "name": app_name}),
    ]
    return Supervised(f"bench-latency-{app_name}", argv, settings, policy=Policy(max_restarts=0))


def measure_level(
    settings: Settings,
    params: Params,
    batch_size: int,
    rate: float,
    votes: Path,
    fraction: float,
    tags: list[str],
    on_sending: Callable[[int], None] | None = None,
) -> Level:
    """`on_sending`: called with the worker's pid just before the first vote is sent."""
    app = build_app(params, name=f"bench-lat-{uuid.uuid4().hex[:8]}")
    tags.append(app.name)
    topics = AppTopics(app.name)
    loader = Loader(settings, app)
    loader.load_reference_data()
    batches = [
        (b.batch_id, [dataclasses.asdict(v) for v in b.votes])
        for b in iter_batches(votes, batch_size)
    ]
    worker = _worker(settings, app.name, params)
    worker.start()

    def alive() -> bool:
        return worker.supervisor.live_pid() is not None

    # The sender connects, learns the votes topic's leader and gets its producer id while
    # the worker starts; else the first sends wait in its queue and count as latency.
    producer = Producer({**idempotent_producer_config(settings), "linger.ms": 1})
    producer.list_topics(topics.stream("votes"), timeout=30)
    try:
        wait_for_batches(settings, topics.commits, {"contestant_rows": 1}, 120, alive)
        # The votes in memory, frozen: else this process's own full collections (50 ms and
        # more, walking them all) stall the sender and the reader and count as latency.
        freeze_startup_objects()
        if on_sending is not None and (pid := worker.child_pid()) is not None:
            on_sending(pid)
        latencies, span = _paced(producer, settings, loader, topics, batches, rate)
    finally:
        worker.stop()
    return level_of(fraction, rate, latencies, span, "txstream")


def level_of(
    fraction: float, rate: float, latencies: Sequence[float], span: float, system: str
) -> Level:
    """The percentiles of `latencies` (seconds, in send order) past the warm-up."""
    ordered = sorted(latencies[int(rate * WARMUP_S) :])
    return Level(
        fraction,
        rate,
        len(latencies) / span,
        len(ordered),
        statistics.median(ordered) * 1000,
        ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
        ordered[-1] * 1000,
        system,
    )


def send_paced(
    producer: Producer,
    topic: str,
    records: Sequence[tuple[int, bytes]],
    rate: float,
    key: bytes | None = None,
) -> tuple[float, dict[int, float]]:
    """Send record i at start + i/rate (waking every SEND_TICK_S to send what is due);
    returns the start and each batch id's send time."""
    sent: dict[int, float] = {}
    start = time.monotonic()
    for i, (batch_id, value) in enumerate(records):
        due = start + i / rate
        if due > time.monotonic():
            time.sleep(max(due - time.monotonic(), SEND_TICK_S))
        send(producer, topic, value, key=key)
        sent[batch_id] = time.monotonic()
        producer.poll(0)
    producer.flush(30)
    return start, sent


class _Notices(threading.Thread):
    """Follows the app's commit notices in a thread of its own, blocking in librdkafka, so
    the paced sender never busy-waits on two cores shared with the worker and the broker.
    `seen` holds (when seen, last committed votes batch id), in order."""

    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(daemon=True)
        self.schema = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")
        self.consumer = Consumer(
            read_committed_consumer_config(settings, f"lat-{uuid.uuid4().hex}")
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.seen: list[tuple[float, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                # poll, not consume(n, timeout): consume waits out its timeout unless n
                # notices arrive, which would add up to that timeout to every latency.
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    notice: Any = decode_record(self.schema, msg.value() or b"")
                    last = int(notice["last_batch_ids"].get("votes", 0))
                    self.seen.append((time.monotonic(), last))
        finally:
            self.consumer.close()

    def committed(self) -> int:
        return max((last for _, last in self.seen), default=0)


def _paced(
    producer: Producer,
    settings: Settings,
    loader: Loader,
    topics: AppTopics,
    batches: Sequence[tuple[int, list[dict[str, Any]]]],
    rate: float,
) -> tuple[list[float], float]:
    """Send the batches paced at `rate`; return each batch's send-to-committed latency, and
    the seconds from the first send to the last batch committed."""
    notices = _Notices(settings, topics.commits)
    notices.start()
    topic, codec = topics.stream("votes"), codecs_of(settings, loader.app)["votes"]
    last_id = batches[-1][0]
    records = [(b, codec.encode("votes", b, tuples)) for b, tuples in batches]
    deadline = time.monotonic() + len(batches) / rate + 120
    try:
        start, sent = send_paced(producer, topic, records, rate)
        while notices.committed() < last_id:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{notices.committed()}/{last_id} batches committed in time")
            time.sleep(0.05)
    finally:
        notices.stopping.set()
        notices.join()
    span = max(t for t, _ in notices.seen) - start
    latencies: list[float] = []
    acked = 0
    for seen, last in notices.seen:
        latencies += [seen - sent[b] for b in range(acked + 1, last + 1) if b in sent]
        acked = max(acked, last)
    return latencies, span


def run(
    settings: Settings,
    params: Params,
    batch_size: int,
    max_rate: float,
    seconds: float,
    seed: int,
    work: Path,
    tags: list[str],
    fractions: Sequence[float] = FRACTIONS,
    peer: Callable[[float, Path, float], Level] | None = None,
) -> list[Level]:
    """txstream at each fraction of `max_rate`, and with `peer(rate, votes, fraction)` the
    peer right after it on the same votes: the same offered rates for both, in one run."""
    levels = []
    for fraction in fractions:
        rate = max_rate * fraction
        votes = work / f"latency-{fraction}.txt"
        write_votes_file(
            votes,
            max(100, int(rate * seconds)) * batch_size,
            contestants=params.contestants,
            seed=seed + 1,
        )
        measured = [measure_level(settings, params, batch_size, rate, votes, fraction, tags)]
        if peer is not None:
            measured.append(peer(rate, votes, fraction))
        for level in measured:
            print(
                f"{level.system} latency at {rate:,.0f} batches/s: p50 {level.p50_ms:.0f} ms, "
                f"p99 {level.p99_ms:.0f} ms",
                file=sys.stderr,
            )
        levels += measured
    return levels


def markdown(levels: Sequence[Level], meta: dict[str, Any]) -> str:
    out = [
        f"Date: {meta['date']}. Machine: {meta['machine_text']}. Command: `{meta['command']}`.",
        "",
        f"Offered rates are fractions of the maximum of {meta.get('latency_of', 'txstream')}.",
        "",
        "| system | load | offered batches/s | achieved batches/s | batches | p50 | p99 | max |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for v in levels:
        out.append(
            f"| {v.system} | {v.fraction:.0%} of max | {v.target_rate:,.0f} "
            f"| {v.achieved_rate:,.0f} | {v.batches:,} | {v.p50_ms:,.0f} ms "
            f"| {v.p99_ms:,.0f} ms | {v.max_ms:,.0f} ms |"
        )
    return "\n".join(out)


def plot(levels: Sequence[Level], meta: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.subplots()
    for system in dict.fromkeys(v.system for v in levels):
        mine = [v for v in levels if v.system == system]
        xs = [v.target_rate for v in mine]
        ax.plot(xs, [v.p50_ms for v in mine], marker="o", label=f"{system} p50")
        ax.plot(xs, [v.p99_ms for v in mine], marker="s", label=f"{system} p99")
    ax.set_xlabel("offered load (batches/s, 1 vote per batch)")
    ax.set_ylabel("send to committed (ms)")
    ax.set_title(f"leaderboard latency at equal offered rates, {meta['date']}")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=150)
