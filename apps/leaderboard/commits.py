"""Read an app's committed output back from Kafka: commit notices and the changelog."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from io import BytesIO
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from fastavro import schemaless_reader

from txstream.commit.state_codec import StateCodec, table_rows
from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.schemas.registry import SchemaRegistry


def _consumer(settings: Settings, topic: str, eof: bool) -> Consumer:
    conf = read_committed_consumer_config(settings, f"reader-{uuid.uuid4().hex}")
    conf["enable.partition.eof"] = eof
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def wait_for_batches(
    settings: Settings,
    commits_topic: str,
    targets: Mapping[str, int],
    timeout_s: float,
    alive: Callable[[], bool],
    progress: Callable[[dict[str, int]], None] | None = None,
) -> None:
    """Follow commit notices until, for every stream, its target batch id is committed."""
    schema = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")
    consumer = _consumer(settings, commits_topic, eof=False)
    done: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError("the worker's supervisor is gone; see its log")
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is not None:
                    continue
                notice: Any = schemaless_reader(BytesIO(msg.value() or b""), schema, None)
                for stream, last in notice["last_batch_ids"].items():
                    done[stream] = max(done.get(stream, 0), int(last))
                if progress is not None:
                    progress(done)
                if all(done.get(s, 0) >= b for s, b in targets.items()):
                    return
        raise TimeoutError(f"{dict(targets)} not all committed within {timeout_s:.0f}s")
    finally:
        consumer.close()


def changelog_entries(settings: Settings, topic: str) -> Iterator[tuple[bytes, bytes | None]]:
    """Every committed changelog record of partition 0, in order, to the committed end."""
    consumer = _consumer(settings, topic, eof=True)
    try:
        while True:
            for msg in consumer.consume(5000, timeout=1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise RuntimeError(f"reading {topic}: {err}")
                key = msg.key()
                if key is not None:
                    yield key, msg.value()
    finally:
        consumer.close()


def committed_tables(settings: Settings, codec: StateCodec, topic: str) -> dict[str, Any]:
    """The committed state as plain tables, rebuilt from the changelog alone."""
    state: dict[bytes, bytes] = {}
    for key, value in changelog_entries(settings, topic):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return table_rows(codec, state)
