"""Read one partition, read_committed, from an offset up to its committed end.

The end is the last stable offset: librdkafka signals it with a partition-EOF event, so a
reader needs no guess at the high watermark. Two waits stood between a small partition and
that event, 0.5 s each, most of `txstream verify`'s time (profiled): the broker holds a
fetch that finds nothing new for `fetch.wait.max.ms`, and `consume` returns early only with
its full count of messages. Both are short here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config

_WAIT_S = 0.02


class ReadError(RuntimeError):
    """The partition could not be read to its committed end."""


def read_to_committed_end(
    settings: Settings,
    topic: str,
    partition: int = 0,
    start: int = 0,
    *,
    timeout_s: float = 300.0,
) -> Iterator[Message]:
    """Every committed record of `topic[partition]` from `start`, in order, then stop."""
    conf = read_committed_consumer_config(settings, f"{topic}-reader-{uuid.uuid4().hex}")
    conf["enable.partition.eof"] = True
    conf["fetch.wait.max.ms"] = 10
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if time.monotonic() > deadline:
                raise ReadError(
                    f"{topic}[{partition}] did not reach its committed end within {timeout_s:.0f}s"
                )
            for msg in consumer.consume(1000, timeout=_WAIT_S):
                err = msg.error()
                if err is None:
                    yield msg
                elif err.code() == KafkaError._PARTITION_EOF:
                    return
                else:
                    raise ReadError(f"reading {topic}[{partition}]: {err}")
    finally:
        consumer.close()
