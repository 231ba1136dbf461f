"""Bring RocksDB up to the committed end of the changelog before any new work.

Call it only after the engine's transactional producer has run init_transactions: that
aborts whatever its previous incarnation left open, so the read_committed end of the
changelog is final and the catch-up below terminates.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from txstream.commit.committed_state import CommittedState
from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config


class RestoreError(RuntimeError):
    """The changelog could not be read to its end in time."""


def restore(
    state: CommittedState,
    settings: Settings,
    changelog: str,
    partition: int,
    *,
    timeout_s: float = 300.0,
    apply_every: int = 20_000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Apply changelog records from RocksDB's recorded offset to the end; returns the count."""
    start = state.changelog_offset()
    conf = read_committed_consumer_config(settings, group_id=f"{changelog}-restore")
    conf["enable.partition.eof"] = True
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(changelog, partition, start)])
    pending: dict[bytes, bytes | None] = {}
    next_offset, applied = start, 0
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if time.monotonic() > deadline:
                raise RestoreError(
                    f"restore of {changelog}[{partition}] did not reach the end within "
                    f"{timeout_s:.0f}s (at offset {next_offset})"
                )
            at_end = False
            for msg in consumer.consume(1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end = True
                        continue
                    raise RestoreError(f"reading {changelog}[{partition}]: {err}")
                key = msg.key()
                if key is None:
                    continue
                pending[key] = msg.value()
                next_offset = (msg.offset() or 0) + 1
                applied += 1
            if pending and (at_end or len(pending) >= apply_every):
                state.apply(pending, next_offset)
                pending = {}
                if progress is not None:
                    progress(applied)
            if at_end:
                return applied
    finally:
        consumer.close()
