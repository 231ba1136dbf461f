"""Put the workload's input on Kafka the way a user's producer would: atomic batches."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from leaderboard.reference_data import reference_batches
from leaderboard.votes_file import iter_batches
from txstream import BatchProducer
from txstream.config import Settings
from txstream.kafka.clients import idempotent_producer_config, send
from txstream.model.app import App


class Loader:
    """The Leaderboard's input, sent by the public `BatchProducer` (schema-checked rows,
    transactions)."""

    def __init__(self, settings: Settings, app: App) -> None:
        self.app = app
        self.producer = BatchProducer(app, settings)

    def load_reference_data(self) -> None:
        """Contestants and area codes, as batch 1 of their streams, in one transaction."""
        with self.producer.transaction():
            for stream, tuples in reference_batches(self.app.params["contestants"]).items():
                self.producer.send(stream, tuples, batch_id=1)

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
        batches = iter_batches(votes, batch_size)
        while chunk := list(itertools.islice(batches, commit_every)):
            with self.producer.transaction():
                for batch in chunk:
                    rows = [dataclasses.asdict(v) for v in batch.votes]
                    last = self.producer.send("votes", rows, batch_id=batch.batch_id)
            if progress is not None:
                progress(last)
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
