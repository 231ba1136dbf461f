"""The tuple schemas an app's engines have written each stream with: the app's `schemas` topic.

Stream records are schemaless Avro envelopes; each carries its tuple schema's fingerprint in
a header (`codec.WRITER_HEADER`). A reader whose schema directory has moved on (a field
added since) needs the schema an old record was written with to read it. A worker publishes
its streams' schemas when it starts, one record per stream and version, keyed
`stream@fingerprint` in a compacted topic, so every version stays readable for as long as
records written with it do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from fastavro import parse_schema

from txstream.config import Settings
from txstream.kafka.clients import common_config, error_text, idempotent_producer_config, send
from txstream.kafka.topics import AppTopics
from txstream.schemas.codec import BatchCodec, schema_fingerprint
from txstream.schemas.registry import to_avsc

MISSING = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
)


class SchemasUnavailable(RuntimeError):
    """The schemas topic could not be written or read to its end."""


@dataclass(frozen=True)
class Published:
    stream: str
    fingerprint: str
    schema: dict[str, Any]  # the tuple schema, self-contained `.avsc` JSON


def publish(
    settings: Settings, topics: AppTopics, codecs: Mapping[str, BatchCodec], timeout_s: float = 30
) -> None:
    """Record each stream's tuple schema (idempotent: a known version is written again under
    its own key, which compaction folds)."""
    producer = Producer(idempotent_producer_config(settings))
    for stream, codec in sorted(codecs.items()):
        schema = to_avsc(codec.tuple_schema)
        value = {"stream": stream, "fingerprint": codec.fingerprint, "schema": schema}
        send(producer, topics.schemas, json.dumps(value).encode(),
             key=f"{stream}@{codec.fingerprint}".encode(), partition=0)  # fmt: skip
    left = producer.flush(timeout_s)
    if left:
        raise SchemasUnavailable(
            f"{left} schema records to {topics.schemas} not acknowledged in {timeout_s:.0f} s"
        )


def published(settings: Settings, topics: AppTopics, timeout_s: float = 30) -> list[Published]:
    """Every version recorded in the topic, read to its end (none if it does not exist)."""
    consumer = Consumer({**common_config(settings), "group.id": "txstream-schemas",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topics.schemas, 0), timeout=timeout_s
            )
        except KafkaException as e:
            if e.args and e.args[0].code() in MISSING:
                return []
            raise SchemasUnavailable(f"{topics.schemas}: {error_text(e)}") from e
        consumer.assign([TopicPartition(topics.schemas, 0, low)])
        found: dict[bytes, Published] = {}
        position = low
        while position < high:
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise SchemasUnavailable(f"{topics.schemas}: no record in {timeout_s:.0f} s")
            if msg.error():
                raise SchemasUnavailable(f"{topics.schemas}: {msg.error()}")
            position = (msg.offset() or 0) + 1
            key, value = msg.key(), msg.value()
            if key is None or value is None:
                continue
            doc = json.loads(value)
            schema = doc["schema"]
            fingerprint = schema_fingerprint(parse_schema(schema))
            found[key] = Published(doc["stream"], fingerprint, schema)
        return sorted(found.values(), key=lambda p: (p.stream, p.fingerprint))
    finally:
        consumer.close()
