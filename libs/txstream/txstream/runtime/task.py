"""One partition engine wired to Kafka and RocksDB: the unit a worker runs.

Like a Kafka Streams StreamTask it has explicit states, CREATED -> RESTORING -> RUNNING ->
CLOSED, and is made of parts with one job each:

- `PartitionState` owns the store, its committed view, snapshots and repair;
- `PartitionEngine` runs the transactions into a group;
- `InputRouter` turns each delivered record into an engine call, or defers it;
- `ExchangeSender` sends this engine's reads for spanning batches;
- `CommitPipeline` decides when a group commits and runs the commit's phases;
- `TaskReads` answers reads of the committed state, asked from other threads;
- `TaskCalls` runs direct transactions sent to the worker's endpoint, and answers them.

Opening the task fences any zombie producer, restores state (the newest usable of RocksDB
and the snapshots, then the changelog or the command log), and returns the input positions
to seek to; then it is fed records, and commits as its pipeline says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from txstream import failpoints
from txstream.commit.group_commit import GroupCommitter, UnencodableState
from txstream.commit.pipeline import Commit, CommitPipeline, CommitSummary
from txstream.commit.policy import CommitPolicy
from txstream.commit.record_limit import RECORD_FRAMING, RecordLimit
from txstream.config import Settings
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import transactional_producer_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.observability import metrics
from txstream.oltp.messages import ENDPOINT_REPLY, Wire
from txstream.oltp.origin import Origin
from txstream.recovery.changelog import restore
from txstream.recovery.command_log import CommandLogCodec
from txstream.recovery.policy import RecoveryPolicy
from txstream.recovery.replay import replay
from txstream.recovery.sources import BorderSources
from txstream.runtime.direct_calls import CALL_WAKE_S, TaskCalls
from txstream.runtime.exchange_sender import ExchangeSender
from txstream.runtime.input_router import InputRecord, InputRouter
from txstream.runtime.inputs import Inputs
from txstream.runtime.partition_state import PartitionState
from txstream.runtime.reads import TaskReads
from txstream.runtime.task_metrics import TaskMetrics
from txstream.runtime.unencodable_marker import UnencodableMarker
from txstream.schemas.codec import BatchCodec
from txstream.state.codec import StateCodec
from txstream.state.reads_codec import ReadsCodec
from txstream.state.store import StateStoreCorruption

log = logging.getLogger(__name__)

# Reads for spanning batches started while a poll's records are handled go out together at
# its end, packed per engine (`ExchangeSender.send`), or once this many are waiting.
READS_PACKED = 64

__all__ = ["InputRecord", "PartitionTask", "TaskState"]


class TaskState(Enum):
    CREATED = "created"
    RESTORING = "restoring"  # fencing, rebuilding state, loading the engine
    RUNNING = "running"  # taking input and committing
    CLOSED = "closed"


class PartitionTask:
    def __init__(
        self,
        app: App,
        partition: int,
        settings: Settings,
        policy: CommitPolicy = CommitPolicy(),
        recovery: RecoveryPolicy | None = None,
    ) -> None:
        self.app = app
        self.partition = partition
        self.settings = settings
        self.policy = policy
        self.recovery = recovery or RecoveryPolicy(app.recovery)
        self.status = TaskState.CREATED
        self.topics = AppTopics(app.name)
        self.dataflow = app.dataflow()
        self.registry = app.schema_registry(settings.schema_dir)
        mode = self.recovery.mode
        self.log_codec = (
            CommandLogCodec(self.registry, app.name, partition, mode) if mode.logged else None
        )
        self.codec = StateCodec(self.dataflow, self.registry)
        self.batch_codecs = {
            s.name: BatchCodec(self.registry.get(s.schema))
            for s in self.dataflow.decl.streams.values()
        }
        self.inputs = Inputs.of(app)
        self.wire = Wire(self.registry, Origin.of(settings))
        self.partition_state = PartitionState(
            settings,
            app.name,
            partition,
            self.codec,
            self.recovery,
            "cmdlog" if mode.logged else "changelog",
            self.topics.command_log if mode.logged else None,
        )
        self.metrics = TaskMetrics(app.name, partition)
        self.reads = TaskReads(app.name)
        self.calls = TaskCalls(
            f"app {app.name} recovers from its command log, which replays only what Kafka "
            "holds: send its direct transactions through Kafka (TxClient direct_via='kafka')"
            if mode.logged
            else ""
        )
        self._opened = ExitStack()  # what `open` opened, closed in reverse by `close`

    @property
    def state_dir(self) -> Path:
        return self.partition_state.dir

    def _transition(self, to: TaskState, *allowed: TaskState) -> None:
        if self.status not in allowed:
            raise RuntimeError(
                f"partition task {self.app.name} p{self.partition} cannot go from "
                f"{self.status.value} to {to.value}"
            )
        self.status = to

    def open(self) -> dict[str, int]:
        """Fence, restore, and return {input topic: next offset} for this partition. A
        failure closes what was opened, and the task with it."""
        self._transition(TaskState.RESTORING, TaskState.CREATED)
        try:
            positions = self._open()
        except BaseException:
            self.status = TaskState.CLOSED
            self._opened.close()
            raise
        self._transition(TaskState.RUNNING, TaskState.RESTORING)
        self.reads.serve(self.engine.reader, self.inputs.topics, self.dataflow.decl.streams)
        return positions

    def _open(self) -> dict[str, int]:
        self.producer = Producer(
            {
                **transactional_producer_config(
                    self.settings, self.topics.transactional_id(self.partition)
                ),
                # Every group ends in a flush, so lingering batches nothing more and costs
                # the Leaderboard's tail latency (docs/performance-history.md, commit path).
                "linger.ms": 0,
                "queue.buffering.max.messages": 500_000,
                "message.max.bytes": self.settings.kafka_max_record_bytes + RECORD_FRAMING,
            }
        )
        self._opened.callback(self.producer.flush, 5)
        self.producer.init_transactions(60)
        started = time.monotonic()
        self.state = self.partition_state.open()
        self._opened.callback(self.partition_state.close)
        record_check = RecordLimit(
            self.settings.kafka_max_record_bytes, self.topics, self.batch_codecs, self.codec
        )
        engines = self._engines()
        self.engine = PartitionEngine(
            self.dataflow,
            self.state,
            self.partition,
            self.app.params,
            self.recovery.journal,
            timer=metrics.te_timer(self.app.name),
            record_check=record_check,
            flat_tables=self.codec.flat_tables,
            owner=None if engines is None else partial(partition_of, partitions=engines),
            partitions=engines or 1,
        )
        reads = ReadsCodec(self.codec, self.registry)
        self.router = InputRouter(
            self.engine, self.dataflow, self.topics, self.inputs, self.batch_codecs, self.wire,
            reads,
        )  # fmt: skip
        # only apps with spanning procedures send reads: no second producer for the rest
        self.exchange = (
            ExchangeSender(self.settings, self.topics.exchange, reads)
            if self.router.spanning
            else None
        )
        if self.exchange is not None:
            self._opened.callback(self.exchange.close)
        self.checked = UnencodableMarker(
            self.state_dir.with_name(f"p{self.partition}.checked"), record_check
        )
        self.checked.load()
        held = self._restore()
        self.recovered_s = time.monotonic() - started
        self.metrics.recovered(self.recovered_records, self.recovered_s)
        log.info("recovered p%d: %d %s records in %.2fs", self.partition,
                 self.recovered_records, self.partition_state.log_name,
                 self.recovered_s)  # fmt: skip
        if held:
            log.info("p%d holds prepared transactions %s until decided", self.partition, held)
        committer = GroupCommitter(
            self.producer,
            self.topics,
            self.partition,
            self.codec,
            self.state,
            self.batch_codecs,
            self.registry.get("txstream.AbortRecord"),
            self.registry.get("txstream.CommitNotice"),
            self.log_codec,
            self.wire,
            self.settings.kafka_max_record_bytes,
            self._reply_partitions(),
        )
        self.pipeline = CommitPipeline(committer, self.policy)
        self._opened.callback(self.pipeline.abandon)
        self.router.catch_up(self.settings)
        return self.rewind()

    def _restore(self) -> list[str]:
        """Restore, load, serve (`PartitionEngine.load`): the engine takes what its state
        keeps only from a store caught up with the changelog, or, replaying the command
        log, as of the store's own offset, which the replay goes on from. Returns the
        prepared transactions held."""
        if self.log_codec is None:
            n = restore(self.state, self.settings, self.topics.changelog, self.partition)
            held = self.engine.load()
        else:
            self.engine.load()
            by_topic = {t: self.batch_codecs[s] for t, s in self.inputs.streams.items()}
            sources = BorderSources(self.settings, self.partition, by_topic)
            n = replay(self.engine, self.state, self.codec, self.log_codec, sources,
                       self.settings, self.topics.command_log,
                       oltp=self.router.replay_oltp)  # fmt: skip
            held = sorted(self.engine.participant.prepared)  # as the replay left them
        self.recovered_records = n
        return held

    def _reply_partitions(self) -> int:
        """The client reply topic's partition count, for apps with transactions (the
        engines answer direct ones); 1 for the rest (no broker call)."""
        if not self.app.decl.transactions:
            return 1
        return len(TopicAdmin(self.settings).partitions(self.topics.oltp_out))

    def _engines(self) -> int | None:
        """The app's partition count, which its changelog has (made with the other topics),
        for spanning and repartitioned procedures: they place keys by the routing function
        over it. None for apps with neither (no broker call)."""
        if not (self.inputs.exchange or self.inputs.hops):
            return None
        return len(TopicAdmin(self.settings).partitions(self.topics.changelog))

    # --- input ---------------------------------------------------------------------------

    def held_back(self) -> list[str]:
        """Input topics not to deliver yet (`InputRouter.held_back`)."""
        return self.router.held_back()

    def at_end(self, topic: str, end: int) -> None:
        """The consumer has read `topic` to its end, offset `end`."""
        self.router.at_end(topic, end)

    def positions(self) -> dict[str, int]:
        """{input topic: next offset to read}, as of the last processed record."""
        return self.router.positions()

    def rewind(self) -> dict[str, int]:
        """The consumer is about to seek to `positions()`: forget records received past them."""
        return self.router.rewind()

    def tables(self) -> dict[str, Any]:
        """The committed state in RocksDB as plain tables: {table: {key: row}}."""
        return self.partition_state.tables()

    def run(self, records: Iterable[InputRecord], backlog: bool = False) -> Iterator[None]:
        """Handle a delivered run of (topic, offset, value, key) records, pausing whenever a
        group commit is due; the caller commits (`start_commit`) and resumes. The records
        at hand all handled, time is told, and a waiting 2PC vote is committed.
        `backlog`: more input is waiting (the poll was full), so groups may grow longer."""
        outbox = self.engine.spans.outbox
        for topic, offset, value, key in records:
            self._handle(topic, offset, value, key)
            if len(outbox) >= READS_PACKED:
                self._send_reads()
            if self.commit_due(backlog=backlog):
                yield
        self._send_reads()
        self.tick()
        if self.commit_due(end_of_run=True, backlog=backlog):
            yield

    def handle(
        self, topic: str, offset: int, value: bytes | None, key: bytes | None = None
    ) -> None:
        """Process one input record; a record before the current position is a redelivery.
        Reads for spanning batches it started go out at once."""
        self._handle(topic, offset, value, key)
        self._send_reads()

    def _handle(self, topic: str, offset: int, value: bytes | None, key: bytes | None) -> None:
        if self.engine.group.empty:
            self.pipeline.opened()
        try:
            self.router.handle(topic, offset, value, key)
        except StateStoreCorruption:
            self.partition_state.drop()
            raise

    def tick(self, inquire_every_s: float = 3.0) -> None:
        """Time passes: a participant blocked on a 2PC decision asks for it again; work
        waiting long for other engines is reported."""
        if self.engine.reinquire(inquire_every_s):
            self.pipeline.opened()
        if self.router.spanning:
            self.metrics.spans(self.engine.spans)
        if self.engine.inboxes:
            self.metrics.hops(self.engine.inboxes)

    def run_calls(self) -> None:
        """Run the direct transactions sent to the endpoint that can run now
        (`TaskCalls`); the group answers them once committed."""
        if not self.calls.waiting:
            return
        if self.engine.group.empty:
            self.pipeline.opened()
        try:
            self.calls.run(self.router.call)
        except StateStoreCorruption:
            self.partition_state.drop()
            raise

    def _send_reads(self) -> None:
        if self.exchange is not None and self.engine.spans.outbox:
            self.exchange.send(self.engine.spans.outbox)
            self.engine.spans.outbox.clear()

    # --- commit --------------------------------------------------------------------------

    def commit_due(self, end_of_run: bool = False, backlog: bool = False) -> bool:
        """Whether to start a commit now (`CommitPipeline.due`)."""
        group = self.engine.group
        # spanning input may wait for this group's per-partition work
        waits = self.router.spanning and group.flags.local and self.router.waiting
        return self.pipeline.due(group, end_of_run=end_of_run, backlog=backlog, input_waits=waits)

    def idle_wait(self, longest_s: float) -> float:
        """How long the delivery loop may wait for input before the task needs it back:
        not at all while new calls wait, and briefly while they keep coming."""
        if self.calls.new:
            return 0.0
        if self.calls.recent:
            longest_s = min(longest_s, CALL_WAKE_S)
        return self.pipeline.idle_wait(self.engine.group, longest_s)

    def commit(self) -> CommitSummary:
        """Commit the pending group and wait: all processed so far is committed, in Kafka
        and in RocksDB, when it returns. Returns the counts of the last group committed."""
        infos = self.start_commit()
        infos += self.finish_commit(wait=True)
        return infos[-1] if infos else CommitSummary.none()

    def start_commit(self) -> list[CommitSummary]:
        """Send the pending group to Kafka, after the commit in flight (waited for) is
        done; processing may go on meanwhile. Returns what that wait finished."""
        done = self.finish_commit(wait=True)
        if not self.engine.group.empty:
            if self.exchange is not None:
                self._send_reads()
                self.exchange.delivered()
            positions = self.positions()  # read through the group, so before it is taken
            self.pipeline.submit(self.engine.take_group(in_flight=True), positions)
        return done

    def finish_commit(self, wait: bool = False) -> list[CommitSummary]:
        """Finish the commit in flight if it is done (or, with `wait`, once it is), then
        the task's own post-commit work. Returns its counts."""
        try:
            commit = self.pipeline.poll(wait)
        except StateStoreCorruption:
            self.partition_state.drop()
            raise
        except UnencodableState:
            self.checked.failed(self.positions())
            raise
        if commit is None:
            return []
        self._post_commit(commit)
        self._send_reads()  # of spanning batches the held input started
        return [commit.summary]

    def _post_commit(self, commit: Commit) -> None:
        """After a group is in Kafka and RocksDB: the engine reads the store again, held
        input goes on, metrics count it, and a snapshot is taken if due."""
        self.checked.committed(commit.positions)
        self.engine.committed()
        self.reads.committed()
        group = commit.group
        if any(to == ENDPOINT_REPLY for to, _ in group.results):
            failpoints.hit("task.before_endpoint_answers")
            self.calls.committed(group.results)
        if self.router.waiting:  # spanning input may have waited for this commit
            self.router.drain()
            self._send_reads()
        self.metrics.committed(group, commit.seconds)
        if any(r.kind == "vote" for r in group.replies):
            failpoints.hit("engine.after_vote")
        self.partition_state.committed(group.stats.batches)

    def snapshot(self) -> None:
        self.partition_state.snapshot()

    def close(self) -> None:
        """Close after `commit`; a commit still in flight (after a failure) is let end,
        not applied: RocksDB is only a cache of the log, and the restart replays it.
        Closing twice, or a task whose `open` failed, does nothing more."""
        self.status = TaskState.CLOSED
        self.reads.close()
        self.calls.close()
        self._opened.close()
