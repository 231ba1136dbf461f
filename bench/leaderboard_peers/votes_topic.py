"""The votes as a plain Kafka topic for the stream-processor peers: one JSON record per batch.

Faust and Quix Streams read our Avro batch envelopes no better than any other client, so they
get the same batches as JSON, `{"batch_id": b, "votes": [[vote_id, phone, contestant], ...]}`,
on a 1-partition topic. Every record has the same key: Quix scopes state by message key, and
the workload's tables are global.
"""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Producer

from leaderboard.votes_file import iter_batches
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, send

KEY = b"leaderboard"


def produce_votes(settings: Settings, topic: str, votes: Path, batch_size: int) -> int:
    """Create `topic` and write every batch to it; returns the number of batches."""
    TopicAdmin(settings).create_topic(topic, 1)
    producer = Producer({**idempotent_producer_config(settings), "linger.ms": 20})
    count = 0
    for batch in iter_batches(votes, batch_size):
        tuples = [[v.vote_id, v.phone_number, v.contestant_number] for v in batch.votes]
        value = json.dumps({"batch_id": batch.batch_id, "votes": tuples}).encode()
        send(producer, topic, value, key=KEY)
        count += 1
    if producer.flush(60) != 0:
        raise RuntimeError(f"votes not all delivered to {topic} within 60 s")
    return count
