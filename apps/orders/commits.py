"""Follow the commit notices of every partition until each has committed its targets."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry


class CommitWatch:
    """The last batch id each partition has committed, per stream, from `<app>.commits`."""

    def __init__(self, settings: Settings, topic: str, partitions: int) -> None:
        self._schema = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")
        conf = read_committed_consumer_config(settings, f"orders-watch-{uuid.uuid4().hex}")
        self._consumer = Consumer(conf)
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.done: list[dict[str, int]] = [{} for _ in range(partitions)]

    def wait(
        self,
        targets: Mapping[str, list[int]],
        timeout_s: float,
        alive: Callable[[], bool],
        progress: Callable[[list[dict[str, int]]], None] = lambda done: None,
        poll_s: float = 0.05,
    ) -> None:
        """Until every partition p has committed batch `targets[stream][p]` of each stream;
        `progress` is told after each poll of up to `poll_s`."""
        deadline = time.monotonic() + timeout_s
        while not self._reached(targets):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not all batches committed within {timeout_s:.0f}s")
            if not alive():
                raise RuntimeError("a worker's supervisor is gone; see its log")
            self.reached(targets, poll_s)
            progress(self.done)

    def reached(self, targets: Mapping[str, list[int]], poll_s: float = 0.0) -> bool:
        """Take in the notices that have come (waiting up to `poll_s` for one); whether
        every partition p has now committed batch `targets[stream][p]` of each stream."""
        for msg in self._consumer.consume(500, timeout=poll_s):
            if msg.error() is not None:
                continue
            notice: Any = decode_record(self._schema, msg.value() or b"")
            seen = self.done[notice["partition"]]
            for stream, last in notice["last_batch_ids"].items():
                seen[stream] = max(seen.get(stream, 0), int(last))
        return self._reached(targets)

    def _reached(self, targets: Mapping[str, list[int]]) -> bool:
        return all(
            self.done[p].get(stream, 0) >= last
            for stream, per_partition in targets.items()
            for p, last in enumerate(per_partition)
        )

    def close(self) -> None:
        self._consumer.close()
