"""Sequencer throughput: raw JSON events in, sealed batches out, all in Kafka transactions.

    .venv/bin/python bench/sequencer_bench.py --events 100000

Produces the events first, then times one in-process sequencer from its first read until the
transaction holding the last sealed batch has committed. Prints markdown rows for
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path

import typer
from confluent_kafka import Producer

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, send
from txstream.kafka.topics import AppTopics
from txstream.sequencer_config import load_config
from txstream_sequencer.runtime import Sequencer


def machine() -> str:
    return f"{platform.node()}, {os.cpu_count()} cores, {platform.python_version()}"


def produce(settings: Settings, topic: str, events: int, per_batch: int) -> None:
    producer = Producer({**idempotent_producer_config(settings), "linger.ms": 20})
    for i in range(events):
        record = {"vote_id": i, "phone_number": 6170000000 + i, "contestant_number": i % 50 + 1}
        if per_batch:
            record["batch_id"] = i // per_batch + 1
        send(producer, topic, json.dumps(record).encode())
    if producer.flush(120) != 0:
        sys.exit("events not delivered")


def measure(settings: Settings, events: int, per_batch: int, policy: str) -> float:
    raw, app, name = f"bench-raw-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}", "b"
    admin = TopicAdmin(settings)
    admin.create_topic(raw, 1)
    admin.create_topic(AppTopics(app).stream("votes"), 1)
    produce(settings, raw, events, per_batch)
    ids = 'batch_id_field = "batch_id"\nseal_after_ms = 50' if per_batch else policy
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "seq.toml"
        config.write_text(
            f'name = "{name}-{uuid.uuid4().hex[:8]}"\n[[routes]]\ntopic = "{raw}"\n'
            f'app = "{app}"\nstream = "votes"\nschema = "leaderboard.Vote"\n{ids}\n'
        )
        sequencer = Sequencer(load_config(config), settings)
        sequencer.open()
        started = time.monotonic()
        group = time.monotonic()
        while True:
            sequencer.step()
            if time.monotonic() - group >= 0.1:
                sequencer.commit()
                group = time.monotonic()
                done = sequencer.input_offsets()  # committed through the last event?
                if done and done[0].offset >= events:
                    break
        elapsed = time.monotonic() - started
        sequencer.close()
    return events / elapsed


def main(events: int = typer.Option(100_000, help="raw events per case")) -> None:
    settings = Settings()
    cases = [
        ("client ids, 1 event per batch", 1, ""),
        ("client ids, 10 events per batch", 10, ""),
        ("batching policy, 100 events or 50 ms", 0, "policy_events = 100\npolicy_ms = 50"),
    ]
    for label, per_batch, policy in cases:
        rate = measure(settings, events, per_batch, policy)
        print(f"| {date.today()} | {machine()} | `bench/sequencer_bench.py --events {events}`"
              f" | {label} | {rate:,.0f} events/s |")  # fmt: skip


if __name__ == "__main__":
    typer.run(main)
