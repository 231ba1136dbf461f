"""Feed an opened PartitionTask from its input topics: consume, process, group-commit.

The consumer is assigned (not subscribed) at the positions the task restored, and reads
read_committed, so it sees only batches whose producers committed. Records come in bulk:
the first wait returns as soon as one record is there, and whatever else librdkafka has
already fetched is taken with it, so a busy input is worked in runs and a quiet one waits
no longer than one record's arrival.

After a start, an app with spanning procedures gets only its spanning input (and the
exchange, and 2PC decisions) until that input has caught up with its end at the start
(`PartitionTask.held_back`): the others' partitions stay paused. The end of a partition is
signalled by librdkafka (partition EOF), since a transaction's commit marker may sit at the
last offset, which no record ever reaches.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from txstream.commit.pipeline import CommitSummary
from txstream.kafka.clients import read_committed_consumer_config
from txstream.runtime.task import PartitionTask

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 10


def whole_ms(seconds: float) -> float:
    """A wait librdkafka keeps: it waits in whole milliseconds, and confluent-kafka truncates
    the seconds it is given, so a wait under 1 ms would not wait at all, and a loop waiting
    for a group to come due would spin (up to 3,370 polls a second at 4,900 batches/s).
    Rounded up instead, half a millisecond over so the truncation lands on it; a group
    starts its commit at most 1 ms late. 0 stays 0: a poll that only looks."""
    if seconds <= 0:
        return 0.0
    # less a nanosecond first: a float such as 0.007 * 1000 is 7.000000000000001, not 7
    return (math.ceil(seconds * 1000 - 1e-6) + 0.5) / 1000


class TaskPump:
    def __init__(self, task: PartitionTask, positions: dict[str, int]) -> None:
        self.task = task
        conf = read_committed_consumer_config(task.settings, f"pump-{uuid.uuid4().hex}")
        # A fetch that finds nothing returns within this bound, so a quiet input (reference
        # data, OLTP topics) never holds back the next fetch of a busy one.
        self._paused = [TopicPartition(t, task.partition) for t in task.held_back()]
        eof = bool(self._paused)  # the end of a partition is looked for only to catch up
        self.consumer = Consumer(
            {**conf, "fetch.wait.max.ms": FETCH_MAX_WAIT_MS, "enable.partition.eof": eof}
        )
        self.consumer.assign(
            [TopicPartition(t, task.partition, off) for t, off in positions.items()]
        )
        if self._paused:
            self.consumer.pause(self._paused)

    def step(self, max_records: int = 500, timeout_s: float = 0.05) -> list[CommitSummary]:
        """Process what is available, starting a commit whenever a group is due (after any
        record, so the commit policy holds however many records one poll returns).
        Returns the commits that finished meanwhile."""
        with self.task.reads.idle():  # reads are answered on their own threads meanwhile
            first = self.consumer.poll(whole_ms(self.task.idle_wait(timeout_s)))
        msgs = [] if first is None else [first, *self.consumer.consume(max_records - 1, 0)]
        records = [
            (topic, msg.offset() or 0, msg.value(), msg.key())
            for msg in msgs
            if msg.error() is None and (topic := msg.topic()) is not None
        ]
        finished = self.task.finish_commit()
        self.task.run_calls()  # direct transactions sent to the endpoint meanwhile
        backlog = len(msgs) >= max_records  # a full poll: more is waiting
        for _ in self.task.run(records, backlog):
            finished += self.task.start_commit()
        finished += self.task.finish_commit()
        if self._paused:
            self._catch_up(msgs)
        self.task.reads.answer_waiting()
        return finished

    def _catch_up(self, msgs: list[Message]) -> None:
        """Tell the task which inputs reached their end; resume the paused ones once it
        holds them back no more."""
        for msg in msgs:
            err, topic = msg.error(), msg.topic()
            if err is not None and err.code() == KafkaError._PARTITION_EOF and topic:
                self.task.at_end(topic, msg.offset() or 0)
        if not self.task.held_back():
            log.info("p%d: spanning input caught up: %s resumed", self.task.partition,
                     ", ".join(tp.topic for tp in self._paused))  # fmt: skip
            self.consumer.resume(self._paused)
            self._paused = []

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
        done: Callable[[CommitSummary], bool],
        timeout_s: float,
        on_commit: Callable[[CommitSummary], None] | None = None,
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
