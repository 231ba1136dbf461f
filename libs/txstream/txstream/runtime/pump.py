"""Feed an opened PartitionTask from its input topics: consume, process, group-commit.

The consumer is assigned (not subscribed) at the positions the task restored, and reads
read_committed, so it sees only batches whose producers committed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from txstream.kafka.clients import read_committed_consumer_config
from txstream.runtime.task import PartitionTask

CommitInfo = dict[str, Any]


class TaskPump:
    def __init__(self, task: PartitionTask, positions: dict[str, int]) -> None:
        self.task = task
        conf = read_committed_consumer_config(task.settings, f"pump-{uuid.uuid4().hex}")
        self.consumer = Consumer(conf)
        self.consumer.assign(
            [TopicPartition(t, task.partition, off) for t, off in positions.items()]
        )

    def step(self, max_records: int = 500, timeout_s: float = 0.05) -> list[CommitInfo]:
        """Process what is available, committing whenever a group is due (after any record,
        so the commit policy holds however many records one poll returns)."""
        records = [
            (topic, msg.offset() or 0, msg.value())
            for msg in self.consumer.consume(max_records, timeout=timeout_s)
            if msg.error() is None and (topic := msg.topic()) is not None
        ]
        return [self.task.commit() for _ in self.task.run(records)]

    def run_until(
        self,
        done: Callable[[CommitInfo], bool],
        timeout_s: float,
        on_commit: Callable[[CommitInfo], None] | None = None,
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for info in self.step():
                if on_commit is not None:
                    on_commit(info)
                if done(info):
                    return
        raise TimeoutError(f"the task did not finish within {timeout_s:.0f}s")

    def close(self) -> None:
        self.consumer.close()
