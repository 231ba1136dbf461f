"""The coordinator process: Kafka in and out around the `protocol.Coordinator` machine.

It reads client requests (`<app>.oltp.in`) and engine replies (`<app>.replies`) read
committed, and writes with one transactional producer, whose stable transactional.id
fences a zombie coordinator. Input offsets commit inside the same Kafka transaction as the
actions they caused, so after a crash each request and reply is handled exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from txstream import failpoints
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import (
    read_committed_consumer_config,
    send,
    transactional_producer_config,
)
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.model.app import App
from txstream.oltp.messages import CoordinatorLog, EngineReply, TxnRequest, Wire
from txstream.schemas.registry import SchemaRegistry
from txstream_coordinator import metrics
from txstream_coordinator.protocol import Actions, Coordinator

log = logging.getLogger(__name__)

POLL_S = 0.005


class CoordinatorService:
    def __init__(self, app: App, settings: Settings, resend_s: float = 2.0) -> None:
        self.app = app
        self.settings = settings
        self.topics = AppTopics(app.name)
        self.wire = Wire(SchemaRegistry(settings.schema_dir))
        self.resend_s = resend_s
        self.stopping = threading.Event()
        self._offsets: dict[str, int] = {}

    def open(self) -> None:
        admin = TopicAdmin(self.settings)
        ensure_topics(
            admin, self.topics, self.app.decl.streams, self.settings.kafka_partitions, oltp=True
        )
        partitions = len(admin.partitions(self.topics.requests))
        decl = self.app.decl
        self.machine = Coordinator(
            partitions,
            self.topics,
            decl.transactions,
            decl.tables,
            self.resend_s,
            on_count=lambda outcome: metrics.OUTCOMES.labels(outcome).inc(),
        )
        self.producer = Producer(
            {
                **transactional_producer_config(
                    self.settings, f"txstream-{self.app.name}-coordinator"
                ),
                "linger.ms": 1,
            }
        )
        self.producer.init_transactions(60)  # fences a zombie coordinator
        started = time.monotonic()
        records = list(self._log())
        acts = self.machine.recover(records, time.monotonic())
        self.recovery_s = time.monotonic() - started
        metrics.RECOVERY_SECONDS.set(self.recovery_s)
        in_doubt = len(self.machine.active)
        log.info(
            "coordinator of %s: epoch %d, %d log records, %d in doubt, %d partitions",
            self.app.name,
            self.machine.epoch,
            len(records),
            in_doubt,
            partitions,
        )
        conf = read_committed_consumer_config(
            self.settings, f"txstream-{self.app.name}-coordinator"
        )
        self.consumer = Consumer(conf)
        inputs = [TopicPartition(self.topics.oltp_in, 0), TopicPartition(self.topics.replies, 0)]
        committed = self.consumer.committed(inputs, timeout=30)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
        self.consumer.assign(committed)
        self._flush(acts, force=True)

    def _log(self) -> Iterator[CoordinatorLog]:
        for msg in read_to_committed_end(self.settings, self.topics.coordinator_log, 0, 0):
            if msg.value():
                yield self.wire.decode(CoordinatorLog, msg.value() or b"")

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.step()
        finally:
            self.close()

    def step(self, max_records: int = 2000) -> None:
        acts = Actions()
        now = time.monotonic()
        # consume() waits out its whole timeout unless max_records arrive: keep it short,
        # since every client and every 2PC participant waits on this loop.
        for msg in self.consumer.consume(max_records, timeout=POLL_S):
            if msg.error() is None:
                acts.extend(self._handle(msg, now))
        acts.extend(self.machine.tick(time.monotonic()))
        self._flush(acts)
        metrics.IN_DOUBT.set(len(self.machine.active))

    def _handle(self, msg: Message, now: float) -> Actions:
        topic = msg.topic() or ""
        self._offsets[topic] = (msg.offset() or 0) + 1
        try:
            if topic == self.topics.oltp_in:
                return self.machine.request(self.wire.decode(TxnRequest, msg.value() or b""), now)
            return self.machine.reply(self.wire.decode(EngineReply, msg.value() or b""), now)
        except (ValueError, TypeError, EOFError, KeyError) as e:
            log.error("skipping undecodable record %s[0]@%s: %s", topic, msg.offset(), e)
            metrics.OUTCOMES.labels("undecodable").inc()
            return Actions()

    def _flush(self, acts: Actions, force: bool = False) -> None:
        """One Kafka transaction for the step: log records, engine requests, client results,
        decisions and input offsets. A decision reaches participants only with the log
        record that makes it durable, atomically; a restarted coordinator's
        `init_transactions` completes a transaction the crash left committing before it
        reads the log, so it never misses a decision a participant has seen."""
        for refused, why in acts.refused:
            log.warning("refused request %s, answered nowhere: %s", refused.request_id, why)
        if not acts and not self._offsets and not force:
            return
        p = self.producer
        p.begin_transaction()
        for record in acts.log:
            send(p, self.topics.coordinator_log, self.wire.encode(record), partition=0)
        for part, req in acts.requests:
            if req.kind == "prepare" and failpoints.hit("coordinator.drop_prepare"):
                log.warning("failpoint: dropping the prepare of %s to %d", req.txn_id, part)
                continue
            send(p, self.topics.requests, self.wire.encode(req), partition=part)
        for reply_to, result in acts.results:
            send(p, reply_to, self.wire.encode(result), key=result.request_id.encode(), partition=0)
        for part, d in acts.decisions:
            if failpoints.hit("coordinator.drop_decision"):
                log.warning("failpoint: dropping the decision on %s to %d", d.txn_id, part)
                continue
            send(p, self.topics.decisions, self.wire.encode(d), partition=part)
        if self._offsets:
            offsets = [TopicPartition(t, 0, o) for t, o in self._offsets.items()]
            p.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata(), 30)
            self._offsets = {}
        p.commit_transaction(60)
        kinds = {r.kind for r in acts.log}
        if "begin" in kinds:
            failpoints.hit("coordinator.after_prepare")
        if "decision" in kinds:
            failpoints.hit("coordinator.after_decision")

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(5)
