"""Test helpers: feed the leaderboard app's topics and drive an EngineTask in-process."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from leaderboard.dataflow import Params, build_app
from leaderboard.reference_data import contestants, load_area_code_states
from leaderboard.votes_file import iter_batches
from txstream.app import App
from txstream.commit.state_codec import table_rows
from txstream.commit.task import EngineTask
from txstream.commit.topics import AppTopics, ensure_topics
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import read_committed_consumer_config, transactional_producer_config
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry


def new_app(params: Params) -> App:
    return build_app(params, name=f"lb-{uuid.uuid4().hex[:8]}")


def load_inputs(settings: Settings, app: App, votes: Path, batch_size: int) -> int:
    """Create the app's topics and produce reference rows and vote batches; returns last id."""
    topics = AppTopics(app.name)
    ensure_topics(TopicAdmin(settings), topics, app.decl.streams, partitions=1)
    registry = SchemaRegistry(settings.schema_dir)
    codecs = {s.name: BatchCodec(registry.get(s.schema)) for s in app.decl.streams.values()}
    producer = Producer(transactional_producer_config(settings, f"loader-{app.name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    rows = [
        {"contestant_number": n, "contestant_name": name, "num_votes": 0}
        for n, name in contestants(app.params["contestants"]).items()
    ]
    producer.produce(
        topics.stream("contestant_rows"),
        codecs["contestant_rows"].encode("contestant_rows", 1, rows),
    )
    codes = [{"area_code": a, "state": s} for a, s in load_area_code_states().items()]
    producer.produce(
        topics.stream("area_code_rows"), codecs["area_code_rows"].encode("area_code_rows", 1, codes)
    )
    producer.commit_transaction()
    last = 0
    producer.begin_transaction()
    for batch in iter_batches(votes, batch_size):
        tuples = [dataclasses.asdict(v) for v in batch.votes]
        producer.produce(
            topics.stream("votes"), codecs["votes"].encode("votes", batch.batch_id, tuples)
        )
        producer.poll(0)
        last = batch.batch_id
    producer.commit_transaction()
    return last


def drive(task: EngineTask, settings: Settings, until_batch: int, timeout_s: float = 120) -> int:
    """Feed the opened task from its committed positions until `until_batch` of the votes
    stream is committed; returns the last committed votes batch id."""
    positions = task.open()
    consumer = Consumer(read_committed_consumer_config(settings, f"drive-{uuid.uuid4().hex}"))
    consumer.assign([TopicPartition(t, 0, off) for t, off in positions.items()])
    done = task.engine.sys_value(("batch", "votes", 0)) or 0
    deadline = time.monotonic() + timeout_s
    try:
        while done < until_batch:
            assert time.monotonic() < deadline, f"stuck at votes batch {done}"
            for msg in consumer.consume(200, timeout=0.1):
                topic = msg.topic()
                if msg.error() is None and topic is not None:
                    task.handle(topic, msg.offset() or 0, msg.value())
            info = task.commit()
            done = max(done, info.get("last", {}).get("votes", 0))
    finally:
        consumer.close()
    return done


def committed_tables(task: EngineTask) -> dict[str, Any]:
    entries = dict(task.store.scan(b""))
    return table_rows(task.codec, entries)
