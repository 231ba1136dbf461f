"""Quix Streams' end-to-end latency at a paced rate, measured as `latency` measures txstream's.

The Quix app (`quix_app.py`) starts on an empty votes topic. Once it has answered a probe
(its consumer group joined, its state open), votes go to it at the offered rate from a
plain idempotent producer, one batch per record, as they go to txstream. A batch's latency
runs from its send to the moment a read_committed consumer sees the app's output record for
it: Quix writes that record in the Kafka transaction that commits the batch's state and
input offset, so the batch is then committed and visible, as txstream's commit notice says
of its batches. The first WARMUP_S seconds of sends are left out, as for txstream.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.leaderboard_peers.latency import Level, level_of, send_paced
from bench.leaderboard_peers.peer_process import stop
from bench.leaderboard_peers.quix import start_app
from bench.leaderboard_peers.votes_topic import KEY
from leaderboard.dataflow import Params
from leaderboard.votes_file import iter_batches
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, read_committed_consumer_config

SYSTEM = "Quix Streams"
START_TIMEOUT_S = 120.0


class _Outputs(threading.Thread):
    """Follows the app's committed output in a thread of its own: when each batch id was
    seen, and whether the probe was answered."""

    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            read_committed_consumer_config(settings, f"quixlat-{uuid.uuid4().hex}")
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.seen: dict[int, float] = {}
        self.answered = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                msg = self.consumer.poll(0.1)  # returns at the first record
                if msg is None or msg.error() is not None:
                    continue
                out = json.loads(msg.value() or b"{}")
                if "result" in out:
                    self.answered.set()
                elif "batch_id" in out:
                    self.seen.setdefault(int(out["batch_id"]), time.monotonic())
        finally:
            self.consumer.close()


def measure_level(
    settings: Settings,
    params: Params,
    batch_size: int,
    rate: float,
    votes: Path,
    fraction: float,
    work: Path,
    tags: list[str],
) -> Level:
    name = f"bench-quixlat-{uuid.uuid4().hex[:8]}"
    tags.append(name)
    source, sink = f"{name}.votes", f"{name}.results"
    admin = TopicAdmin(settings)
    admin.create_topic(source, 1)
    admin.create_topic(sink, 1)
    records = [
        (b.batch_id, json.dumps({"batch_id": b.batch_id, "votes": [
            [v.vote_id, v.phone_number, v.contestant_number] for v in b.votes
        ]}).encode())
        for b in iter_batches(votes, batch_size)
    ]  # fmt: skip
    outputs = _Outputs(settings, sink)
    outputs.start()
    producer = Producer({**idempotent_producer_config(settings), "linger.ms": 1})
    producer.list_topics(source, timeout=30)
    app, log = start_app(settings, params, source, sink, name, work)
    try:
        producer.produce(source, json.dumps({"result": True}).encode(), key=KEY)
        producer.flush(30)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not outputs.answered.wait(0.2):
            if app.poll() is not None:
                raise RuntimeError(f"the Quix app exited ({app.returncode}); see {log.name}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Quix app did not start in {START_TIMEOUT_S:.0f} s")
        start, sent = send_paced(producer, source, records, rate, key=KEY)
        deadline = time.monotonic() + 120
        while len(outputs.seen) < len(sent):
            if app.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Quix Streams: {len(outputs.seen)}/{len(sent)} batches out")
            time.sleep(0.05)
    finally:
        outputs.stopping.set()
        outputs.join()
        stop(app, log)
    order = sorted(sent, key=sent.__getitem__)
    latencies = [outputs.seen[b] - sent[b] for b in order]
    span = max(outputs.seen.values()) - start
    return level_of(fraction, rate, latencies, span, SYSTEM)
