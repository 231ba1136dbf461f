"""The coordinator process: Kafka in and out around the `coordinator.Coordinator` machine.

It reads client requests (`<app>.oltp.in`) and engine replies (`<app>.replies`) read
committed, and writes with one transactional producer, whose stable transactional.id
fences a zombie coordinator. The positions reached in both inputs go in the coordinator's
own log, a `positions` record in the same Kafka transaction as the actions they caused, so
after a crash each request and reply is handled exactly once. That costs one small record,
where committing the offsets to the group (`send_offsets_to_transaction`) cost two round
trips to the broker in every transaction, on two of a 2PC transfer's three hops. A log
written before positions were logged has none: the group's committed offsets, which were
then committed the same way, stand in for them.

Any number of coordinator processes may run for one app: the consumer group picks the
active one (`leadership.Leadership`) and the others stand by. A process that becomes
active calls `init_transactions`, fencing its predecessor's producer, replays the log and
serves; one that loses the role, or finds its producer fenced, stops serving and stands by
again. Fencing alone would let whoever started last win, so two live coordinators would
take the role from each other in turn; the group gives it to one and keeps it there. A
standby takes over one session timeout (`coordinator_session_timeout_s`) after the active
one dies, or at once when it stops cleanly.

Every `coordinator_log_truncate_s` the active coordinator deletes the log below
`Coordinator.truncation_point()` (`delete_records`), right after a commit, when the
machine's state is exactly what the log replays to, and never past the newest positions
record. Deleting keeps the log a plain sequence that recovery reads as ever; compaction
would need a key per record and tombstones, and still keep one record per ended
transaction.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from txstream import failpoints
from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.kafka.clients import (
    error_text,
    read_committed_consumer_config,
    send,
    transactional_producer_config,
)
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.model.app import App
from txstream.oltp.messages import CoordinatorLog, EngineReply, TxnRequest, Wire, reply_partition
from txstream.oltp.origin import Origin, Unauthenticated
from txstream.schemas.registry import SchemaRegistry
from txstream_coordinator import metrics
from txstream_coordinator.actions import Actions
from txstream_coordinator.coordinator import Coordinator
from txstream_coordinator.leadership import Leadership

log = logging.getLogger(__name__)

POLL_S = 0.005
STANDBY_POLL_S = 0.1


@dataclass
class _Serving:
    """The clients of the active role; a standby has none."""

    producer: Producer
    consumer: Consumer


@dataclass
class _Send:
    topic: str
    value: bytes
    partition: int
    key: bytes | None = None


class CoordinatorService:
    def __init__(self, app: App, settings: Settings, resend_s: float = 2.0) -> None:
        self.app = app
        self.settings = settings
        self.topics = AppTopics(app.name)
        self.wire = Wire(SchemaRegistry(settings.schema_dir), Origin.of(settings))
        self.resend_s = resend_s
        self.stopping = threading.Event()
        self.group_id = f"txstream-{app.name}-coordinator"
        self._positions: dict[str, int] = {}  # input topic -> the next offset to read
        self._unlogged = False  # input handled since the last positions record
        self._positions_offset: int | None = None  # the newest positions record's
        self._serving: _Serving | None = None
        self._log_start = 0
        self._truncate_at = 0.0

    @property
    def active(self) -> bool:
        return self._serving is not None

    def serving_machine(self) -> Coordinator | None:
        """The state machine while this process is the active coordinator (for the console,
        from another thread: the attribute is read once, whole)."""
        return self.machine if self._serving is not None else None

    def open(self) -> None:
        """Make the topics and join the group; `step` serves once this process is active."""
        self.admin = TopicAdmin(self.settings)
        ensure_topics(
            self.admin,
            self.topics,
            self.app.decl.streams,
            self.settings.kafka_partitions,
            oltp=True,
        )
        self.partitions = len(self.admin.partitions(self.topics.requests))
        self.reply_partitions = len(self.admin.partitions(self.topics.oltp_out))
        self.machine = self._new_machine()
        self.leadership = Leadership(self.settings, self.group_id, self.topics.oltp_in)
        metrics.ACTIVE.set(0)
        log.info(
            "coordinator of %s standing by until group %s assigns it %s[0]",
            self.app.name,
            self.group_id,
            self.topics.oltp_in,
        )

    def _new_machine(self) -> Coordinator:
        decl = self.app.decl
        return Coordinator(
            self.partitions,
            self.topics,
            decl.transactions,
            decl.tables,
            self.resend_s,
            on_count=lambda outcome: metrics.OUTCOMES.labels(outcome).inc(),
            bounds=decl.aggregates,
        )

    def _take_over(self) -> None:
        started = time.monotonic()
        producer = Producer(
            {**transactional_producer_config(self.settings, self.group_id), "linger.ms": 1}
        )
        producer.init_transactions(60)  # fences the previous active coordinator
        records, positions, self._positions_offset = _split_positions(self._log())
        self.machine = self._new_machine()
        acts = self.machine.recover(records, time.monotonic())
        # a partition changing leader can answer with no offset (-1001): nothing truncated yet
        self._log_start = max(0, self.admin.start_offset(self.topics.coordinator_log, 0))
        self._truncate_at = time.monotonic() + self.settings.coordinator_log_truncate_s
        self.recovery_s = time.monotonic() - started
        metrics.RECOVERY_SECONDS.set(self.recovery_s)
        metrics.LOG_START.set(self._log_start)
        consumer = Consumer(read_committed_consumer_config(self.settings, self.group_id))
        inputs = [TopicPartition(self.topics.oltp_in, 0), TopicPartition(self.topics.replies, 0)]
        # The group's offsets: those of a log written before positions were logged.
        starts = consumer.committed(inputs, timeout=30)
        for tp in starts:
            tp.offset = max(tp.offset, positions.get(tp.topic or "", -1))
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
        consumer.assign(starts)
        self._serving = _Serving(producer, consumer)
        self._positions = {tp.topic or "": tp.offset for tp in starts if tp.offset >= 0}
        self._unlogged = True  # the epoch's first transaction logs them
        metrics.ACTIVE.set(1)
        log.info(
            "coordinator of %s took over: epoch %d, %d log records from offset %d, "
            "%d in doubt, %d partitions",
            self.app.name,
            self.machine.epoch,
            len(records),
            self._log_start,
            len(self.machine.active),
            self.partitions,
        )
        self._flush(acts, force=True)

    def _try_take_over(self) -> None:
        """Take over, or leave it to the next step: a broker error on the way (a partition
        changing leader, a broker slow to answer) does not end the process while the
        group still gives it the role; a new attempt fences the last one's producer."""
        try:
            self._take_over()
        except (KafkaException, KafkaAdminError) as e:
            log.warning("coordinator of %s could not take over yet: %s", self.app.name, e)
            metrics.TAKEOVER_RETRIES.inc()

    def _stand_by(self, why: str, rejoin: bool) -> None:
        """Stop serving; after a fenced producer also rejoin the group as a new member, so
        the group, not this process's stale view of it, says who is active."""
        log.warning("coordinator of %s standing by: %s", self.app.name, why)
        serving, self._serving = self._serving, None
        metrics.ACTIVE.set(0)
        self._positions, self._unlogged, self._positions_offset = {}, False, None
        if serving is not None:
            serving.consumer.close()
        if rejoin:
            self.leadership.close()
            self.leadership = Leadership(self.settings, self.group_id, self.topics.oltp_in)

    def _log(self) -> Iterator[tuple[int, CoordinatorLog]]:
        for msg in read_to_committed_end(self.settings, self.topics.coordinator_log, 0, 0):
            if not msg.value():
                continue
            try:
                yield msg.offset() or 0, self.wire.decode(CoordinatorLog, msg.value() or b"")
            except Unauthenticated as e:  # written by a client: it decides nothing
                log.error("skipping %s@%s: %s", self.topics.coordinator_log, msg.offset(), e)
                metrics.OUTCOMES.labels("unauthenticated").inc()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.step()
        finally:
            self.close()

    def step(self, max_records: int = 2000) -> None:
        held = self.leadership.held(0.0 if self.active else STANDBY_POLL_S)
        try:
            if held and not self.active:
                self._try_take_over()
            elif not held and self.active:
                self._stand_by("the group assigned the role to another process", rejoin=False)
            if self._serving is not None:
                self._serve(self._serving, max_records)
        except KafkaException as e:
            if not self.active:
                raise
            self._stand_by(f"cannot commit: {error_text(e)}", rejoin=True)

    def _serve(self, serving: _Serving, max_records: int) -> None:
        acts = Actions()
        now = time.monotonic()
        # consume() waits out its whole timeout unless max_records arrive: keep it short,
        # since every client and every 2PC participant waits on this loop.
        for msg in serving.consumer.consume(max_records, timeout=POLL_S):
            if msg.error() is None:
                acts.extend(self._handle(msg, now))
        acts.extend(self.machine.tick(time.monotonic()))
        self._flush(acts)
        metrics.IN_DOUBT.set(len(self.machine.active))
        self._truncate()

    def _handle(self, msg: Message, now: float) -> Actions:
        topic = msg.topic() or ""
        self._positions[topic] = (msg.offset() or 0) + 1
        self._unlogged = True
        try:
            if topic == self.topics.oltp_in:
                return self.machine.request(self.wire.decode(TxnRequest, msg.value() or b""), now)
            return self.machine.reply(self.wire.decode(EngineReply, msg.value() or b""), now)
        except (ValueError, TypeError, EOFError, KeyError) as e:
            reason = "unauthenticated" if isinstance(e, Unauthenticated) else "undecodable"
            log.error("skipping %s record %s[0]@%s: %s", reason, topic, msg.offset(), e)
            metrics.OUTCOMES.labels(reason).inc()
            return Actions()

    def _flush(self, acts: Actions, force: bool = False) -> None:
        """One Kafka transaction for the step: log records (the positions reached last),
        engine requests, client results and decisions. A decision reaches participants
        only with the log record that makes it durable, atomically; a coordinator taking
        over calls `init_transactions`, which completes a transaction the crash left
        committing, before it reads the log, so it never misses a decision a participant
        has seen.

        A transaction the broker aborts (a partition changing leader midway, say) is sent
        again whole while this process still holds the role; anything else (a fenced
        producer) raises, and the caller stands by."""
        for refused, why in acts.refused:
            log.warning("refused request %s, answered nowhere: %s", refused.request_id, why)
        if not acts and not self._unlogged and not force:
            return
        serving = self._serving
        assert serving is not None, "only the active coordinator writes"
        records = list(acts.log)
        if self._unlogged:
            reached = json.dumps(self._positions, sort_keys=True)
            records.append(CoordinatorLog("positions", self.machine.epoch, results=reached))
        sends = self._sends(acts)
        if acts.decisions:
            failpoints.hit("coordinator.before_decision")
        deadline = time.monotonic() + self.settings.coordinator_session_timeout_s
        while True:
            try:
                offsets = self._commit(serving.producer, records, sends)
                break
            except KafkaException as e:
                err = e.args[0] if e.args else None
                abortable = isinstance(err, KafkaError) and err.txn_requires_abort()
                if not abortable or time.monotonic() > deadline or not self.leadership.held():
                    raise
                log.warning("sending the coordinator's transaction again: %s", error_text(e))
                serving.producer.abort_transaction(30)
        if self._unlogged:
            self._unlogged, self._positions_offset = False, offsets.pop()
        for record, offset in zip(acts.log, offsets, strict=True):
            self.machine.logged(record, offset)
        kinds = {r.kind for r in acts.log}
        if "begin" in kinds:
            failpoints.hit("coordinator.after_prepare")
        if "decision" in kinds:
            failpoints.hit("coordinator.after_decision")

    def _sends(self, acts: Actions) -> list[_Send]:
        """The records besides the log, with the failpoints' drops already made."""
        out: list[_Send] = []
        for part, req in acts.requests:
            if req.kind == "prepare" and failpoints.hit("coordinator.drop_prepare"):
                log.warning("failpoint: dropping the prepare of %s to %d", req.txn_id, part)
                continue
            out.append(_Send(self.topics.requests, self.wire.encode(req), part))
        for reply_to, result in acts.results:
            key = result.request_id.encode()
            part = reply_partition(result.request_id, self.reply_partitions)
            out.append(_Send(reply_to, self.wire.encode(result), part, key))
        for status in acts.statuses:
            key = status.request_id.encode()
            out.append(_Send(self.topics.statuses, self.wire.encode(status), 0, key))
        for part, d in acts.decisions:
            if failpoints.hit("coordinator.drop_decision"):
                log.warning("failpoint: dropping the decision on %s to %d", d.txn_id, part)
                continue
            out.append(_Send(self.topics.decisions, self.wire.encode(d), part))
        return out

    def _commit(self, p: Producer, records: list[CoordinatorLog], sends: list[_Send]) -> list[int]:
        """One Kafka transaction; returns the log offset of each record."""
        offsets: dict[int, int] = {}

        def delivered(i: int) -> Callable[[KafkaError | None, Message], None]:
            def report(err: KafkaError | None, msg: Message) -> None:
                if err is None:
                    offsets[i] = msg.offset() or 0

            return report

        p.begin_transaction()
        for i, record in enumerate(records):
            value = self.wire.encode(record)
            send(p, self.topics.coordinator_log, value, partition=0, on_delivery=delivered(i))
        for m in sends:
            send(p, m.topic, m.value, key=m.key, partition=m.partition)
        p.commit_transaction(60)
        p.poll(0)  # serves any delivery report the commit's flush left queued
        missing = [i for i in range(len(records)) if i not in offsets]
        if missing:
            raise RuntimeError(f"committed log records {missing} without a delivery report")
        return [offsets[i] for i in range(len(records))]

    def _truncate(self) -> None:
        """Delete the log below what recovery needs; a failure waits for the next period."""
        now = time.monotonic()
        if now < self._truncate_at:
            return
        self._truncate_at = now + self.settings.coordinator_log_truncate_s
        point = self.machine.truncation_point()
        if point is not None and self._positions_offset is not None:
            point = min(point, self._positions_offset)
        if point is None or point <= self._log_start:
            return
        try:
            self.admin.delete_records(self.topics.coordinator_log, 0, point)
        except KafkaAdminError as e:
            log.warning("cannot truncate the coordinator log below %d: %s", point, e)
            return
        log.info("truncated the coordinator log of %s below offset %d", self.app.name, point)
        self._log_start = point
        metrics.LOG_START.set(point)

    def close(self) -> None:
        """Leave the group last, once this process can no longer write."""
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.consumer.close()
            serving.producer.flush(5)
        self.leadership.close()


def _split_positions(
    log_records: Iterable[tuple[int, CoordinatorLog]],
) -> tuple[list[tuple[int, CoordinatorLog]], dict[str, int], int | None]:
    """The state machine's records; the newest positions reached in the inputs, and the
    offset of the record that holds them (None if the log holds none)."""
    records: list[tuple[int, CoordinatorLog]] = []
    positions: dict[str, int] = {}
    at: int | None = None
    for offset, record in log_records:
        if record.kind == "positions":
            positions, at = json.loads(record.results), offset
        else:
            records.append((offset, record))
    return records, positions, at
