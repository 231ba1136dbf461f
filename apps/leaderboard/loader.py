"""Put the workload's input on Kafka the way a user's producer would: atomic batches."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from leaderboard.reference_data import reference_batches
from leaderboard.votes_file import iter_batches
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import (
    idempotent_producer_config,
    send,
    transactional_producer_config,
)
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.model.app import App
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry


class Loader:
    def __init__(self, settings: Settings, app: App) -> None:
        self.topics = AppTopics(app.name)
        self.app = app
        ensure_topics(TopicAdmin(settings), self.topics, app.decl.streams, partitions=1)
        registry = SchemaRegistry(settings.schema_dir)
        self.codecs = {
            s.name: BatchCodec(registry.get(s.schema)) for s in app.decl.streams.values()
        }
        self.producer = Producer(
            {**transactional_producer_config(settings, f"loader-{app.name}"), "linger.ms": 5}
        )
        self.producer.init_transactions(60)

    def _send(self, stream: str, batch_id: int, tuples: list[dict[str, object]]) -> None:
        value = self.codecs[stream].encode(stream, batch_id, tuples)
        send(self.producer, self.topics.stream(stream), value)

    def load_reference_data(self) -> None:
        """Contestants and area codes, as batch 1 of their streams, in one transaction."""
        self.producer.begin_transaction()
        for stream, tuples in reference_batches(self.app.params["contestants"]).items():
            self._send(stream, 1, tuples)
        self.producer.commit_transaction()

    def load_votes(
        self,
        votes: Path,
        batch_size: int,
        progress: Callable[[int], None] | None = None,
        commit_every: int = 10_000,
    ) -> int:
        """Every batch of the file, committed in transactions of `commit_every` batches;
        `progress` is told the last batch id of each."""
        last = 0
        self.producer.begin_transaction()
        for batch in iter_batches(votes, batch_size):
            self._send("votes", batch.batch_id, [dataclasses.asdict(v) for v in batch.votes])
            last = batch.batch_id
            if last % commit_every == 0:
                self.producer.commit_transaction()
                if progress is not None:
                    progress(last)
                self.producer.begin_transaction()
        self.producer.commit_transaction()
        return last


def load_raw_votes(
    settings: Settings,
    topic: str,
    votes: Path,
    batch_size: int,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Every vote as its own plain JSON record carrying its batch id, as any Kafka client
    would send it; the sequencer seals them into atomic batches. Returns the last batch id."""
    producer = Producer({**idempotent_producer_config(settings), "linger.ms": 5})
    last = 0
    for batch in iter_batches(votes, batch_size):
        for vote in batch.votes:
            record = {**dataclasses.asdict(vote), "batch_id": batch.batch_id}
            send(producer, topic, json.dumps(record).encode())
        last = batch.batch_id
        if progress is not None and last % 10_000 == 0:
            progress(last)
    if producer.flush(60) != 0:
        raise RuntimeError(f"votes not all delivered to {topic} within 60 s")
    return last
