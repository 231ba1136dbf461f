"""Test helpers: run `txstream sequencer run` as a child process and read what it wrote."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tests.support.kafka_reads import read_to_end
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin, TopicNotFoundError
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.topics import AppTopics
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry


def write_config(path: Path, name: str, routes: list[dict[str, Any]]) -> Path:
    """A sequencer TOML file; route values are strings, numbers or booleans."""

    def value(v: Any) -> str:
        return json.dumps(v) if not isinstance(v, bool) else str(v).lower()

    lines = [f'name = "{name}"']
    for route in routes:
        lines.append("[[routes]]")
        lines += [f"{k} = {value(v)}" for k, v in route.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class SequencerProcess(ServiceProcess):
    def __init__(self, settings: Settings, config: Path, log: Path, *extra: str) -> None:
        """`extra`: more arguments of `txstream sequencer run` (`--app`, `--params`)."""
        self.config = config
        super().__init__(settings, ["sequencer", "run", "--config", str(config), *extra], log)


def produce_events(
    settings: Settings,
    topic: str,
    events: Iterable[dict[str, Any] | bytes],
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> None:
    """Raw events, one record each, as an ordinary (non-transactional) client sends them."""
    producer = Producer(idempotent_producer_config(settings))
    for event in events:
        value = event if isinstance(event, bytes) else json.dumps(event).encode()
        producer.produce(topic, value, headers=headers)
    assert producer.flush(30) == 0


def batches_by_partition(
    settings: Settings, app: str, stream: str, schema: str
) -> dict[int, list[Any]]:
    """Every committed batch on the stream's border topic, per partition, in order; none
    while the sequencer has not yet created the topic."""
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get(schema))
    topic = AppTopics(app).stream(stream)
    try:
        partitions = TopicAdmin(settings).partitions(topic)
    except TopicNotFoundError:
        return {}
    return {p: [codec.decode(v) for _, v in read_to_end(settings, topic, p)] for p in partitions}


def read_batches(settings: Settings, app: str, stream: str, schema: str) -> list[Any]:
    by_partition = batches_by_partition(settings, app, stream, schema)
    return [b for p in sorted(by_partition) for b in by_partition[p]]


def read_dead_letters(settings: Settings, topic: str) -> list[dict[str, Any]]:
    schema = SchemaRegistry(settings.schema_dir).get("txstream.DeadLetter")
    return [decode_record(schema, v) for _, v in read_to_end(settings, topic)]


def wait_until(condition: Any, timeout_s: float, alive: Any, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if not alive():
            raise AssertionError(f"the process under test exited while waiting for {what}")
        time.sleep(0.2)  # polling a Kafka read for a condition, not standing in for one
    raise AssertionError(f"timed out waiting for {what}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
