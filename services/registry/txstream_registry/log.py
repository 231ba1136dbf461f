"""The registry's durable state: one compacted Kafka topic, written in Kafka transactions.

Each schema version and each compatibility level is a record keyed by what it sets, so
compaction keeps the last of each and a replay rebuilds the whole state. Writes go through
a transactional producer with one stable transactional.id: a second registry started on the
same cluster fences the first, whose next write fails, so two never assign the same id to
different schemas.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from confluent_kafka import KafkaException, Producer

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin, TopicExistsError
from txstream.kafka.clients import send, transactional_producer_config
from txstream.kafka.read import read_to_committed_end

TOPIC = "txstream-registry.schemas"
TRANSACTIONAL_ID = "txstream-schema-registry"


class Fenced(RuntimeError):
    """Another registry took over the log: this one must stop."""


class SchemaLog:
    def __init__(self, settings: Settings, topic: str = TOPIC) -> None:
        self.settings, self.topic = settings, topic
        admin = TopicAdmin(settings)
        if topic not in admin.list_topics():
            # made meanwhile by another registry: fine
            with contextlib.suppress(TopicExistsError):
                admin.create_topic(topic, 1, config={"cleanup.policy": "compact"})
        self.producer = Producer(transactional_producer_config(settings, TRANSACTIONAL_ID))
        self.producer.init_transactions(60)  # fences an earlier registry

    def replay(self) -> Iterator[dict[str, Any]]:
        for msg in read_to_committed_end(self.settings, self.topic):
            if msg.value() is not None:
                yield json.loads(msg.value() or b"")

    def append(self, record: dict[str, Any]) -> None:
        """Log `record` durably (committed) before the caller applies it."""
        key = json.dumps([record["kind"], record["subject"], record.get("version")])
        try:
            self.producer.begin_transaction()
            send(self.producer, self.topic, json.dumps(record).encode(), key=key.encode())
            self.producer.commit_transaction(30)
        except KafkaException as e:
            err = e.args[0]
            if err.fatal() or "fenced" in err.str().lower():
                raise Fenced(f"another schema registry took over {self.topic}: {err}") from e
            if err.txn_requires_abort():
                self.producer.abort_transaction(30)
            raise
