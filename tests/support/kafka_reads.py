"""Reading topics back in tests: until a condition holds, or to the committed end."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.read import read_to_committed_end

TIMEOUT_S = 60.0


def read_until(
    config: dict[str, Any], topic: str, done: Callable[[list[bytes]], bool]
) -> list[bytes]:
    """Values of partition 0 from the start until `done` holds (or a deadline passes)."""
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not done(values):
            assert time.monotonic() < deadline, f"timed out; read so far: {values}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def read_to_end(settings: Settings, topic: str, partition: int = 0) -> list[tuple[bytes, bytes]]:
    """(key, value) of every committed record of one partition, up to the committed end."""
    return [
        (msg.key() or b"", msg.value() or b"")
        for msg in read_to_committed_end(settings, topic, partition, timeout_s=TIMEOUT_S)
    ]


def read_every_partition(settings: Settings, topic: str) -> list[tuple[bytes, bytes]]:
    """`read_to_end` of each of the topic's partitions, one after another."""
    partitions = TopicAdmin(settings).partitions(topic)
    return [kv for p in partitions for kv in read_to_end(settings, topic, p)]
