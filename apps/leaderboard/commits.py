"""Read an app's committed output back: commit notices, the changelog, recovered state."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.kafka.read import read_to_committed_end
from txstream.model.app import App
from txstream.runtime.task import PartitionTask
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec, table_rows


def _consumer(settings: Settings, topic: str) -> Consumer:
    consumer = Consumer(read_committed_consumer_config(settings, f"reader-{uuid.uuid4().hex}"))
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
    consumer = _consumer(settings, commits_topic)
    done: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not alive():
                raise RuntimeError("the worker's supervisor is gone; see its log")
            # consume returns when 500 arrive or the timeout ends: the timeout is the
            # resolution of a progress clock, so it is short
            for msg in consumer.consume(500, timeout=0.02):
                if msg.error() is not None:
                    continue
                notice: Any = decode_record(schema, msg.value() or b"")
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
    for msg in read_to_committed_end(settings, topic):
        key = msg.key()
        if key is not None:
            yield key, msg.value()


def committed_tables(settings: Settings, codec: StateCodec, topic: str) -> dict[str, Any]:
    """The committed state as plain tables, rebuilt from the changelog alone."""
    state: dict[bytes, bytes] = {}
    for key, value in changelog_entries(settings, topic):
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return table_rows(codec, state)


def recovered_tables(settings: Settings, app: App) -> dict[str, Any]:
    """Partition 0's committed state, recovered the way a restarted engine recovers it
    (any mode). Opening the engine fences its producer: call this once the worker is gone."""
    task = PartitionTask(app, 0, settings)
    task.open()
    try:
        return task.tables()
    finally:
        task.close()
