"""Input for the chain: `batches` atomic batches of `batch_size` seeded random tuples on s0."""

from __future__ import annotations

import random

from confluent_kafka import Producer

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import send, transactional_producer_config
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.model.app import App
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry


def batch_tuples(batch_id: int, batch_size: int, seed: int) -> list[dict[str, int]]:
    """The tuples of one batch: a pure function of its id, so references can recompute it."""
    rng = random.Random(seed * 1_000_003 + batch_id)
    return [{"key": rng.randrange(1000), "value": rng.randrange(100)} for _ in range(batch_size)]


def load_batches(
    settings: Settings, app: App, batches: int, batch_size: int = 1, seed: int = 1, first: int = 1
) -> int:
    """Produce batches `first`..`first+batches-1` to the app's s0; returns the last id."""
    topics = AppTopics(app.name)
    ensure_topics(TopicAdmin(settings), topics, app.decl.streams, partitions=1)
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("chain.Item"))
    producer = Producer(
        {**transactional_producer_config(settings, f"chain-loader-{app.name}"), "linger.ms": 5}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    last = first + batches - 1
    for batch_id in range(first, last + 1):
        value = codec.encode("s0", batch_id, batch_tuples(batch_id, batch_size, seed))
        send(producer, topics.stream("s0"), value)
        if batch_id % 10_000 == 0:
            producer.commit_transaction()
            producer.begin_transaction()
    producer.commit_transaction()
    return last
