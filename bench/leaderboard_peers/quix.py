"""Runs peer (c), `quix_app.py`, in the peers venv and times it from its committed output."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.leaderboard_peers.check import Measured
from bench.leaderboard_peers.peer_process import stop
from bench.leaderboard_peers.votes_topic import KEY, produce_votes
from leaderboard.dataflow import Params
from leaderboard.reference_data import AREA_CODES_FILE, DEFAULT_DATA_DIR
from txstream.config import Settings
from txstream.cpus import pinning
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, read_committed_consumer_config

ROOT = Path(__file__).resolve().parents[2]
PEERS_PYTHON = ROOT / ".venv-peers/bin/python"
APP = Path(__file__).with_name("quix_app.py")
GUARANTEES = "exactly-once (Kafka txns + RocksDB changelog); order (1 partition, 1 key)"


def start_app(
    settings: Settings, params: Params, source: str, sink: str, name: str, work: Path
) -> tuple[subprocess.Popen[bytes], IO[str]]:
    """The Quix app reading `source` and writing `sink`, on the CPUs a txstream worker gets
    (`worker_cpus`), so both run on the same ground; its log under `work`."""
    if not PEERS_PYTHON.exists():
        raise RuntimeError(f"{PEERS_PYTHON} is missing: run `make peers-venv`")
    argv = [
        str(PEERS_PYTHON),
        str(APP),
        settings.bootstrap_servers,
        source,
        sink,
        name,
        str(work / name),
        str(DEFAULT_DATA_DIR / AREA_CODES_FILE),
        *(
            str(v)
            for v in (
                params.contestants,
                params.threshold,
                params.max_votes,
                params.window,
                params.slide,
            )
        ),
    ]
    log = (work / f"{name}.log").open("w")
    pin = pinning(settings.worker_cpu_set, "worker_cpus")
    app = subprocess.Popen(argv, cwd=work, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
    return app, log


def run(
    settings: Settings,
    votes: Path,
    params: Params,
    batch_size: int,
    work: Path,
    timeout_s: float,
    tags: list[str],
) -> Measured:
    """Load the votes topic, start the Quix app, and time it from its first committed output
    record to its last (start-up excluded); then ask it for the result document."""
    name = f"bench-quix-{uuid.uuid4().hex[:8]}"
    tags.append(name)
    source, sink = f"{name}.votes", f"{name}.results"
    total = produce_votes(settings, source, votes, batch_size)
    producer = Producer(idempotent_producer_config(settings))
    producer.produce(source, json.dumps({"result": True}).encode(), key=KEY)
    producer.flush(30)
    TopicAdmin(settings).create_topic(sink, 1)
    app, log = start_app(settings, params, source, sink, name, work)
    consumer = Consumer(read_committed_consumer_config(settings, f"{name}-reader"))
    consumer.assign([TopicPartition(sink, 0, 0)])
    try:
        seen, first_n, first_t, last_t = 0, 0, 0.0, 0.0
        doc: dict[str, Any] | None = None
        deadline = time.monotonic() + timeout_s
        while doc is None:
            if app.poll() is not None:
                raise RuntimeError(f"the Quix app exited ({app.returncode}); see {log.name}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Quix Streams: {seen}/{total} batches in {timeout_s}s")
            for msg in consumer.consume(1000, timeout=0.05):
                if msg.error() is not None:
                    continue
                out = json.loads(msg.value() or b"{}")
                if "result" in out:
                    doc = out["result"]
                    continue
                seen += 1
                last_t = time.monotonic()
            if seen and not first_n:  # the clock starts at the first committed output
                first_n, first_t = seen, last_t
    finally:
        consumer.close()
        stop(app, log)
    if seen != total:
        raise RuntimeError(f"Quix Streams: {seen} output records for {total} batches")
    return Measured(
        "Quix Streams, exactly-once, RocksDB state",
        GUARANTEES,
        total - first_n,
        last_t - first_t,
        "read_committed output, first record to last (start-up excluded)",
        doc,
    )
