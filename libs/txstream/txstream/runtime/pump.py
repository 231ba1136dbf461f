"""Feed an opened PartitionTask from its input topics: consume, process, group-commit.

The consumer is assigned (not subscribed) at the positions the task restored, and reads
read_committed, so it sees only batches whose producers committed. Records come in bulk:
the first wait returns as soon as one record is there, and whatever else librdkafka has
already fetched is taken with it, so a busy input is worked in runs and a quiet one waits
no longer than one record's arrival.
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
FETCH_MAX_WAIT_MS = 10


class TaskPump:
    def __init__(self, task: PartitionTask, positions: dict[str, int]) -> None:
        self.task = task
        conf = read_committed_consumer_config(task.settings, f"pump-{uuid.uuid4().hex}")
        # A fetch that finds nothing returns within this bound, so a quiet input (reference
        # data, OLTP topics) never holds back the next fetch of a busy one.
        self.consumer = Consumer({**conf, "fetch.wait.max.ms": FETCH_MAX_WAIT_MS})
        self.consumer.assign(
            [TopicPartition(t, task.partition, off) for t, off in positions.items()]
        )

    def step(self, max_records: int = 500, timeout_s: float = 0.05) -> list[CommitInfo]:
        """Process what is available, starting a commit whenever a group is due (after any
        record, so the commit policy holds however many records one poll returns).
        Returns the commits that finished meanwhile."""
        first = self.consumer.poll(self.task.idle_wait(timeout_s))
        msgs = [] if first is None else [first, *self.consumer.consume(max_records - 1, 0)]
        records = [
            (topic, msg.offset() or 0, msg.value(), msg.key())
            for msg in msgs
            if msg.error() is None and (topic := msg.topic()) is not None
        ]
        finished = self.task.finish_commit()
        backlog = len(msgs) >= max_records  # a full poll: more is waiting
        for _ in self.task.run(records, backlog):
            finished += self.task.start_commit()
        return finished + self.task.finish_commit()

    def lag(self) -> dict[str, int]:
        """Input records not yet processed, by topic, from the high watermarks librdkafka
        last saw (an upper bound: they count open transactions and commit markers too)."""
        out = {}
        for topic, position in self.task.positions().items():
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(topic, self.task.partition), cached=True
            )
            if high >= 0:
                out[topic] = max(0, high - position)
        return out

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
