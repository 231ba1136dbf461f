"""Batches encoded and sent by hand, for the runs that time their own sends.

`txstream.BatchProducer` checks every row and places each batch as the dataflow needs,
which is what a user's producer should do and what the Leaderboard's loader uses. Two
benchmark runs need what it does not offer: the ordering-relaxed peer copies the
reference data to every partition, and the paced runs encode every batch before the clock
starts so that the sender's cost is the same for each system. They use these codecs and
their own transactional producer.
"""

from __future__ import annotations

from confluent_kafka import Producer

from txstream.config import Settings
from txstream.kafka.clients import transactional_producer_config
from txstream.model.app import App
from txstream.schemas.codec import BatchCodec


def codecs_of(settings: Settings, app: App) -> dict[str, BatchCodec]:
    """Each stream's batch codec, from the app's schema registry."""
    registry = app.schema_registry(settings.schema_dir)
    return {s.name: BatchCodec(registry.get(s.schema)) for s in app.decl.streams.values()}


def transactional_producer(settings: Settings, app: App) -> Producer:
    producer = Producer(
        {**transactional_producer_config(settings, f"loader-{app.name}"), "linger.ms": 5}
    )
    producer.init_transactions(60)
    return producer
