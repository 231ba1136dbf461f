"""One partition engine wired to Kafka and RocksDB: the unit a worker runs.

Like a Kafka Streams StreamTask, it owns one transactional producer, one state store and
one engine. Opening it fences any zombie, rebuilds state (from the newest usable of RocksDB
and the snapshots, then the changelog or the command log), and yields the input positions
to seek to; after that it is fed input records, told when to commit, and snapshots itself.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from txstream import failpoints
from txstream.commit.group_commit import GroupCommitter, Sent, UnencodableState
from txstream.commit.policy import OLTP_GROUP_MS, CommitPolicy
from txstream.commit.record_limit import RECORD_FRAMING, RecordLimit
from txstream.config import Settings
from txstream.engine.group import Group
from txstream.engine.hops import PROGRESS
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import promise_id
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, send, transactional_producer_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.observability import metrics
from txstream.oltp.messages import CLIENT_REQUEST_KINDS, Decision, EngineRequest, Wire
from txstream.oltp.origin import Origin, Unauthenticated
from txstream.recovery.changelog import restore
from txstream.recovery.command_log import CommandLogCodec
from txstream.recovery.policy import RecoveryPolicy
from txstream.recovery.replay import replay
from txstream.recovery.snapshots import Snapshots
from txstream.recovery.sources import BorderSources, RecoveryError
from txstream.runtime.checked_mode import CheckedMode
from txstream.runtime.inputs import Inputs
from txstream.schemas.codec import BatchCodec, BatchDecodeError
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec, table_rows
from txstream.state.committed import CommittedState
from txstream.state.reads_codec import ReadsCodec, ReadsDecodeError
from txstream.state.store import (
    StateStore,
    StateStoreCorruption,
    StateStoreError,
    StateStoreLocked,
)

log = logging.getLogger(__name__)

STORE_LOCK_WAIT_S = 60.0
# While a commit is in flight the delivery loop looks back this often, to start the next.
IN_FLIGHT_POLL_S = 0.001
# An input record as the pump delivers it: (topic, offset, value, key).
InputRecord = tuple[str, int, bytes | None, bytes | None]
# A spanning batch waiting this long for other engines' reads is logged (then as often).
SPAN_WARN_S = 10.0


@dataclass(frozen=True)
class _InFlight:
    group: Group
    sent: Future[Sent]
    started: float
    positions: dict[str, int]  # the inputs' next offsets once it commits


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
        self.topics = AppTopics(app.name)
        self.dataflow = app.dataflow()
        registry = SchemaRegistry(settings.schema_dir)
        mode = self.recovery.mode
        self.log_codec = (
            CommandLogCodec(registry, app.name, partition, mode) if mode.logged else None
        )
        self.log_name = "cmdlog" if mode.logged else "changelog"
        self.snapshots = Snapshots(
            settings.data_dir / "snapshots" / app.name / f"p{partition}" / self.log_name,
            self.recovery.keep_snapshots,
        )
        self.codec = StateCodec(self.dataflow, registry)
        self.batch_codecs = {
            s.name: BatchCodec(registry.get(s.schema)) for s in self.dataflow.decl.streams.values()
        }
        self.inputs = Inputs.of(app)
        self.wire = Wire(registry, Origin.of(settings))
        self.reads = ReadsCodec(self.codec, registry)
        self._spanning = bool(self.inputs.exchange)  # the app has spanning procedures
        # Inputs that arrive while a 2PC participant is blocked, in arrival order.
        self._deferred: deque[InputRecord] = deque()
        self._deferred_requests = 0  # of them, the coordinator's requests
        # spanning topic -> the end the consumer reached while some of it was deferred
        self._ends: dict[str, int] = {}
        self._abort_schema = registry.get("txstream.AbortRecord")
        self._notice_schema = registry.get("txstream.CommitNotice")
        self._group_started = 0.0
        self._span_warned = 0.0
        self._hop_warned = 0.0
        self._in_flight: _InFlight | None = None
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()

    @property
    def state_dir(self) -> Path:
        return self.settings.data_dir / "engines" / self.app.name / f"p{self.partition}"

    def open(self) -> dict[str, int]:
        """Fence, restore, and return {input topic: next offset} for this partition."""
        self.producer = Producer(
            {
                **transactional_producer_config(
                    self.settings, self.topics.transactional_id(self.partition)
                ),
                # Every group ends in a flush, so lingering batches nothing more; with 5 ms
                # the Leaderboard's p99 at 2,000-2,500 batches/s was 2-4x this one's in
                # five pairs of five (docs/benchmarks.md, session 29).
                "linger.ms": 0,
                "queue.buffering.max.messages": 500_000,
                "message.max.bytes": self.settings.kafka_max_record_bytes + RECORD_FRAMING,
            }
        )
        self.producer.init_transactions(60)
        # only apps with spanning procedures send reads: no second producer for the rest
        self._reads_producer = (
            Producer({**idempotent_producer_config(self.settings), "linger.ms": 0})
            if self._spanning
            else None
        )
        self._reads_failed: list[KafkaError] = []
        started = time.monotonic()
        self.store = self._open_store()
        self.state = CommittedState(self.store, self.codec, self.log_name)
        seal = RecordLimit(
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
            seal=seal,
            flat_tables=self.codec.flat_tables,
            owner=None if engines is None else partial(partition_of, partitions=engines),
            partitions=engines or 1,
        )
        self.checked = CheckedMode(self.state_dir.with_name(f"p{self.partition}.checked"), seal)
        self.checked.load()
        # Restore, load, serve (`PartitionEngine.load`): the engine takes what its state
        # keeps only from a store caught up with the changelog, or, replaying the command
        # log, as of the store's own offset, which the replay goes on from.
        if self.log_codec is None:
            n = restore(self.state, self.settings, self.topics.changelog, self.partition)
            held = self.engine.load()
        else:
            self.engine.load()
            by_topic = {t: self.batch_codecs[s] for t, s in self.inputs.streams.items()}
            sources = BorderSources(self.settings, self.partition, by_topic)
            n = replay(self.engine, self.state, self.codec, self.log_codec, sources,
                       self.settings, self.topics.command_log, oltp=self._replay_oltp)  # fmt: skip
            held = sorted(self.engine.participant.prepared)  # as the replay left them
        self.recovered_records, self.recovered_s = n, time.monotonic() - started
        labels = (self.app.name, str(self.partition))
        metrics.RECOVERY_SECONDS.labels(*labels).set(self.recovered_s)
        metrics.RECOVERED_RECORDS.labels(*labels).set(n)
        log.info("recovered p%d: %d %s records in %.2fs",
                 self.partition, n, self.log_name, self.recovered_s)  # fmt: skip
        self.committer = GroupCommitter(
            self.producer,
            self.topics,
            self.partition,
            self.codec,
            self.state,
            self.batch_codecs,
            self._abort_schema,
            self._notice_schema,
            self.log_codec,
            self.wire,
            self.settings.kafka_max_record_bytes,
        )
        if held:
            log.info("p%d holds prepared transactions %s until decided", self.partition, held)
        self._catch_up()
        return self.rewind()

    def _catch_up(self) -> None:
        """Per-partition input waits until each spanning topic is read to its end as of
        now, so a batch whose reads went out before a crash runs again first (`SpanRunner`)."""
        if not self._spanning:
            return
        admin = TopicAdmin(self.settings)
        for stream in self.engine.spanning:
            topic = self.topics.stream(stream)
            end = admin.stable_end(topic, self.partition)
            self.engine.spans.catch_up(topic, end)
            if self.engine.spans.catching_up:
                log.info("p%d: other input waits until %s is read from %d to %d, its end now",
                         self.partition, topic, self.engine.position(topic), end)  # fmt: skip

    def held_back(self) -> list[str]:
        """Input topics not to deliver yet: while the spanning input catches up after a
        start, every per-partition one (border streams, repartitioned edges, requests)."""
        if not (self._spanning and self.engine.spans.catching_up):
            return []
        spanning = {self.topics.stream(s) for s in self.engine.spanning}
        flowing = spanning | {self.topics.exchange, self.topics.decisions}
        return [t for t in self.inputs.topics if t not in flowing]

    def at_end(self, topic: str, end: int) -> None:
        """The consumer has read `topic` to its end, offset `end`: a spanning topic is
        caught up once nothing of it waits among the deferred records."""
        if not self._spanning:
            return
        self._ends[topic] = end
        self._reach_ends()

    def _engines(self) -> int | None:
        """The app's partition count, which its changelog has (made with the other topics),
        for spanning and repartitioned procedures: they place keys by the routing function
        over it. None for apps with neither (no broker call)."""
        if not (self._spanning or self.inputs.hops):
            return None
        return len(TopicAdmin(self.settings).partitions(self.topics.changelog))

    def positions(self) -> dict[str, int]:
        """{input topic: next offset to read}, as of the last processed record."""
        return {topic: self.engine.position(topic) for topic in self.inputs.topics}

    def rewind(self) -> dict[str, int]:
        """The consumer is about to seek to `positions()`: forget records received past them."""
        self._deferred.clear()
        self._deferred_requests = 0
        self._ends.clear()
        self._received = self.positions()
        return dict(self._received)

    def tables(self) -> dict[str, Any]:
        """The committed state in RocksDB as plain tables: {table: {key: row}}."""
        return table_rows(self.codec, dict(self.store.scan(b"")))

    def run(self, records: Iterable[InputRecord], backlog: bool = False) -> Iterator[None]:
        """Handle a delivered run of (topic, offset, value, key) records, pausing whenever a group
        commit is due; the caller commits (in whatever thread it keeps for that) and resumes.
        The records at hand all handled, time is told, and a waiting 2PC vote is committed.
        `backlog`: more input is waiting (the poll was full), so groups may grow longer."""
        for topic, offset, value, key in records:
            self.handle(topic, offset, value, key)
            if self.commit_due(backlog=backlog):
                yield
        self.tick()
        if self.commit_due(end_of_run=True, backlog=backlog):
            yield

    def handle(
        self, topic: str, offset: int, value: bytes | None, key: bytes | None = None
    ) -> None:
        """Process one input record; a record before the current position is a redelivery."""
        try:
            self._handle(topic, offset, value, key)
        except StateStoreCorruption:
            self._drop_store()
            raise
        if self._spanning and self.engine.spans.outbox:
            self._send_reads()

    def _send_reads(self) -> None:
        """Spanning reads go out at once, outside the group's transaction: the others wait
        for them, and they are a function of the input alone, so a restarted engine sends
        the same again (the receivers drop the repeat)."""
        assert self._reads_producer is not None
        if self._reads_failed:
            raise RuntimeError(f"spanning reads not delivered: {self._reads_failed[0]}")
        for q, reads in self.engine.spans.outbox:
            for value in self.reads.encode(reads, self.settings.kafka_max_record_bytes - 1024):
                send(self._reads_producer, self.topics.exchange, value, partition=q,
                     on_delivery=self._on_reads)  # fmt: skip
        self.engine.spans.outbox.clear()
        self._reads_producer.poll(0)

    def _reads_delivered(self) -> None:
        """Every read sent is acknowledged: a group that completes a spanning batch must
        not commit while this engine's reads for it could still be lost, since after the
        commit it would never send them again, and the others would wait for them."""
        if self.engine.spans.outbox:
            self._send_reads()
        if self._reads_producer is not None and self._reads_producer.flush(60) != 0:
            raise RuntimeError("spanning reads not delivered within 60 s")
        if self._reads_failed:
            raise RuntimeError(f"spanning reads not delivered: {self._reads_failed[0]}")

    def _on_reads(self, err: KafkaError | None, _: Message) -> None:
        if err is not None:
            self._reads_failed.append(err)

    def _handle(self, topic: str, offset: int, value: bytes | None, key: bytes | None) -> None:
        if offset < self._received[topic]:
            return
        self._received[topic] = offset + 1
        if self.engine.group.empty:
            self._group_started = time.monotonic()
        if topic == self.topics.decisions or topic == self.topics.exchange:
            self._process(topic, offset, value, key)
            self._drain()
        elif self._deferred and topic == self.topics.requests and self._read_ahead(offset, value):
            pass
        elif self._deferred or not self._process(topic, offset, value, key):
            self._deferred.append((topic, offset, value, key))
            self._deferred_requests += topic == self.topics.requests

    def _drain(self) -> None:
        """Process the deferred records, in arrival order, until one must wait again."""
        while self._deferred and self._process(*self._deferred[0]):
            if self._deferred.popleft()[0] == self.topics.requests:
                self._deferred_requests -= 1
        self._reach_ends()

    def _reach_ends(self) -> None:
        """Each spanning topic read to its end with none of its records deferred any more
        is read up to that end."""
        for topic, end in list(self._ends.items()):
            if not any(t == topic for t, *_ in self._deferred):
                del self._ends[topic]
                self.engine.spans.reached(topic, end)

    def _read_ahead(self, offset: int, value: bytes | None) -> bool:
        """A query goes ahead of the records waiting (for spanning batches to run, or for a
        decision): it changes nothing, and between two TEs the engine's state is always
        right after its last batch. Not ahead of an earlier request, though: that one's
        offset would be skipped. False if it must wait after all."""
        return not self._deferred_requests and self._oltp(
            self.topics.requests, offset, value, reads_only=True
        )

    def _process(self, topic: str, offset: int, value: bytes | None, key: bytes | None) -> bool:
        """Process one record; False if it must wait (nothing applied): for a 2PC decision,
        or while spanning batches are queued (`SpanRunner.holds`; a read need not wait, as
        the engine's state between two TEs is always right after its last batch)."""
        if topic == self.topics.exchange:
            self._exchange(offset, value)
            return True
        if topic == self.topics.decisions:
            return self._oltp(topic, offset, value)
        stream = self.inputs.streams.get(topic)
        hop = self.inputs.hops.get(topic)
        if stream is None and hop is None:  # the coordinator's requests
            return self._oltp(topic, offset, value)
        if self._spanning and self.engine.spans.holds(spanning=stream in self.engine.spanning):
            return False
        if hop is not None:
            if self.engine.blocked:
                return False
            self._hop(hop, (topic, self.partition, offset), value, key)
            return True
        assert stream is not None
        if self.engine.blocked:
            return False  # TEs are not checked row by row: they wait for every decision
        source = (topic, self.partition, offset)
        try:
            if value is None:
                raise BatchDecodeError("empty record value")
            batch = self.batch_codecs[stream].decode(value)
        except BatchDecodeError as e:
            self.engine.reject(stream, source, "undecodable", str(e))
            return True
        if batch.stream == PROGRESS:
            self.engine.progress(stream, batch.batch_id, source)
        else:
            self.engine.process(stream, batch.batch_id, batch.tuples, source, value)
        return True

    def _hop(
        self, procedure: str, source: tuple[str, int, int], value: bytes | None, key: bytes | None
    ) -> None:
        """A part of a batch for repartitioned `procedure` (or a progress marker), sent by
        another engine's commit, keyed by that engine; one that cannot be decoded, or names
        no engine, is a dead letter, and moved past."""
        stream = self.dataflow.procedure(procedure).input
        try:
            if value is None:
                raise BatchDecodeError("empty record value")
            batch = self.batch_codecs[stream].decode(value)
            sender = int(key or b"")
            if not 0 <= sender < self.engine.partitions:
                raise ValueError(f"no engine {sender}")
        except (BatchDecodeError, ValueError) as e:
            self.engine.reject(source[0], source, "undecodable", f"{e} (key {key!r})")
            return
        self.engine.process_hop(procedure, sender, batch.batch_id, batch.tuples, source)

    def _exchange(self, offset: int, value: bytes | None) -> None:
        """Another engine's reads for a spanning batch; one that cannot be decoded is a
        dead letter (the batch it was for then waits, and the metrics show it)."""
        source = (self.topics.exchange, self.partition, offset)
        try:
            reads = self.reads.decode(value or b"")
        except ReadsDecodeError as e:
            self.engine.reject(self.topics.exchange, source, "undecodable", str(e))
            return
        self.engine.spans.receive(reads, source)

    def _oltp(self, topic: str, offset: int, value: bytes | None, reads_only: bool = False) -> bool:
        """A coordinator request or decision; one that cannot be decoded is moved past.
        False if it must wait (nothing applied); with `reads_only`, anything but a read."""
        try:
            if value is None:
                raise ValueError("empty record value")
            if not self._apply_oltp(topic, offset, value, reads_only):
                return False
        except (ValueError, TypeError, EOFError, KeyError) as e:
            reason = "unauthenticated" if isinstance(e, Unauthenticated) else "undecodable"
            self.engine.reject(topic, (topic, self.partition, offset), reason, str(e))
            return True
        self.engine.journal_oltp(topic, offset)
        self.engine.set_position(topic, offset + 1)
        return True

    def _apply_oltp(self, topic: str, offset: int, value: bytes, reads_only: bool = False) -> bool:
        if topic == self.topics.decisions:
            self.engine.decide(self.wire.decode(Decision, value))
            return True
        promises = topic == self.topics.promises
        req = self.wire.decode(EngineRequest, value, promises=promises)
        if promises:  # named by its place, whatever its client named it (`promise_id`)
            req = replace(req, txn_id=promise_id(self.partition, offset))
        if (req.kind in CLIENT_REQUEST_KINDS) != promises:
            # clients write promises, and only the coordinator the requests
            raise ValueError(
                f"a {req.kind!r} request on {topic}: {self.topics.promises} takes promised "
                "(BASIC, BASE) transactions only, and nothing else does"
            )
        if req.kind != "read" and (
            reads_only or (self._spanning and self.engine.spans.holds(spanning=False))
        ):
            return False  # it could write rows queued spanning batches have read
        return self.engine.request(req)

    def _replay_oltp(self, topic: str, offset: int, value: bytes) -> None:
        if not self._apply_oltp(topic, offset, value):
            raise RecoveryError(f"replayed {topic} record conflicts with a prepared transaction")

    def tick(self, inquire_every_s: float = 3.0) -> None:
        """Time passes: a participant blocked on a 2PC decision asks for it again; a
        spanning batch waiting long for other engines is reported."""
        if self.engine.reinquire(inquire_every_s):
            self._group_started = time.monotonic()
        if self._spanning:
            self._report_spans()
        if self.engine.inboxes:
            self._report_hops()

    def _report_spans(self) -> None:
        labels = (self.app.name, str(self.partition))
        metrics.SPAN_QUEUED.labels(*labels).set(len(self.engine.spans.queue))
        waiting = self.engine.spans.oldest_wait()
        metrics.SPAN_WAIT_SECONDS.labels(*labels).set(0.0 if waiting is None else waiting[2])
        now = time.monotonic()
        if (
            waiting is not None
            and waiting[2] >= SPAN_WARN_S
            and now >= self._span_warned + SPAN_WARN_S
        ):
            self._span_warned = now
            batch_id, engines, waited = waiting
            log.warning(
                "p%d: spanning batch %d has waited %.0f s for reads from engines %s: is each "
                "up, and was the batch sent to every partition?",
                self.partition, batch_id, waited, engines,
            )  # fmt: skip

    def _report_hops(self) -> None:
        """Parts of ordered hops held for other engines: gauges, and a warning naming the
        engines not heard from, since a producer that never marks its progress (or an
        engine that is down) holds them for good."""
        now = time.monotonic()
        warn = now >= self._hop_warned + SPAN_WARN_S
        for name, inbox in self.engine.inboxes.items():
            labels = (self.app.name, str(self.partition), name)
            waited = inbox.oldest_wait()
            metrics.HOP_WAITING.labels(*labels).set(len(inbox.waiting))
            metrics.HOP_WAIT_SECONDS.labels(*labels).set(waited)
            if warn and waited >= SPAN_WARN_S:
                self._hop_warned = now
                log.warning(
                    "p%d: %d parts for %s have waited up to %.0f s, the next for engines %s: "
                    "is each up, and does its producer mark its progress "
                    "(txstream produce --progress)?",
                    self.partition, len(inbox.waiting), name, waited, inbox.waiting_for(),
                )  # fmt: skip

    def commit_due(self, end_of_run: bool = False, backlog: bool = False) -> bool:
        """Whether to start a commit now; `end_of_run` when the records at hand are all
        handled, which is when a waiting 2PC vote is committed (votes in one run share a
        commit). While one commit is in flight the group grows until that one is done, or
        until the size cap, so under load groups grow to fill the commit's round trips;
        with a `backlog`, a group stays open for the policy's longer busy interval."""
        group = self.engine.group
        if group.empty:
            return False
        if end_of_run and group.urgent:
            return True
        full = group.batches >= self.policy.max_batches
        if self._in_flight is not None and not self._in_flight.sent.done():
            return full
        if self._spanning and group.local and self._deferred:
            return True  # spanning input may wait for this group's per-partition work
        elapsed_ms = (time.monotonic() - self._group_started) * 1000
        # A client waits on each OLTP reply: such a group waits at most OLTP_GROUP_MS.
        wait_ms = self.policy.wait_ms(backlog)
        if group.replies:
            wait_ms = min(wait_ms, OLTP_GROUP_MS)
        return full or elapsed_ms >= wait_ms

    def idle_wait(self, longest_s: float) -> float:
        """How long the delivery loop may wait for input before the task needs it back:
        not past the pending group's commit, nor long after the commit in flight is done."""
        if self._in_flight is not None:
            return min(longest_s, IN_FLIGHT_POLL_S)
        if self.engine.group.empty:
            return longest_s
        due_s = self.policy.interval_ms / 1000 - (time.monotonic() - self._group_started)
        return min(longest_s, max(due_s, 0.0))

    def commit(self) -> dict[str, Any]:
        """Commit the pending group and wait: all processed so far is committed, in Kafka
        and in RocksDB, when it returns. Returns the counts of the last group committed."""
        infos = self.start_commit()
        infos += self.finish_commit(wait=True)
        return infos[-1] if infos else {"batches": 0}

    def start_commit(self) -> list[dict[str, Any]]:
        """Send the pending group to Kafka, after the commit in flight (waited for) is
        done; processing may go on meanwhile. Returns what that wait finished."""
        done = self.finish_commit(wait=True)
        if not self.engine.group.empty:
            self._reads_delivered()
            positions = self.positions()  # read through the group, so before it is taken
            group = self.engine.take_group(in_flight=True)
            sent = self.committer.send(group, positions)
            self._in_flight = _InFlight(group, sent, time.monotonic(), positions)
        return done

    def finish_commit(self, wait: bool = False) -> list[dict[str, Any]]:
        """Finish the commit in flight if it is done (or, with `wait`, once it is): its
        state into RocksDB, then metrics and any snapshot due. Returns its counts."""
        flight = self._in_flight
        if flight is None or not (wait or flight.sent.done()):
            return []
        self._in_flight = None
        try:
            self.committer.finish(flight.sent)
        except StateStoreCorruption:
            self._drop_store()
            raise
        except UnencodableState:
            self.checked.failed(self.positions())
            raise
        self.checked.committed(flight.positions)
        self.engine.committed()
        if self._deferred:  # spanning input may have waited for this commit
            self._drain()
            if self._spanning and self.engine.spans.outbox:
                self._send_reads()
        group = flight.group
        self._count(group, time.monotonic() - flight.started)
        if any(r.kind == "vote" for r in group.replies):
            failpoints.hit("engine.after_vote")
        self._since_snapshot += group.batches
        if self._snapshot_due():
            self.snapshot()
        return [{"batches": group.batches, "aborts": len(group.aborts),
                 "last": group.last_batch_ids}]  # fmt: skip

    def _count(self, group: Group, seconds: float) -> None:
        """Metrics of a committed group: exact, since it is committed only once."""
        app, part = self.app.name, str(self.partition)
        metrics.BATCHES.labels(app, part).inc(group.batches)
        metrics.EXECUTIONS.labels(app, part).inc(group.executions)
        metrics.GROUP_BATCHES.labels(app).observe(group.batches)
        metrics.GROUP_SECONDS.labels(app).observe(seconds)
        for a in group.aborts:
            metrics.ABORTS.labels(app, a.procedure, a.reason).inc()
        for (procedure, reason), n in group.oltp_aborts.items():
            metrics.ABORTS.labels(app, procedure, reason).inc(n)
        for (stream, outcome), n in group.stale.items():
            metrics.STALE_BATCHES.labels(app, stream, outcome).inc(n)
        for window, n in group.slides.items():
            metrics.SLIDES.labels(app, window).inc(n)
        for r in group.replies:
            if r.kind == "vote":
                metrics.PARTICIPANT.labels(app, "vote_yes" if r.ok else "vote_no").inc()
            elif r.kind == "ack" and r.detail in ("committed", "aborted"):
                metrics.PARTICIPANT.labels(app, f"decision_{r.detail}").inc()

    def snapshot(self) -> None:
        """Checkpoint committed state; then the command log below the oldest kept snapshot
        is no longer needed, and is truncated. A failed snapshot (a full disk, say) costs
        only a longer recovery, so it is logged and the engine goes on."""
        self._since_snapshot, self._snapshot_at = 0, time.monotonic()
        try:
            self.snapshots.take(self.store, self.state.log_offset())
        except (StateStoreError, OSError) as e:
            log.error("snapshot of partition %d failed: %s", self.partition, e)
            return
        oldest = self.snapshots.oldest_offset()
        if self.log_codec is not None and oldest is not None:
            TopicAdmin(self.settings).delete_records(
                self.topics.command_log, self.partition, oldest
            )

    def _snapshot_due(self) -> bool:
        every, interval = self.recovery.snapshot_every_batches, self.recovery.snapshot_interval_s
        return bool(every and self._since_snapshot >= every) or bool(
            interval and time.monotonic() - self._snapshot_at >= interval
        )

    def close(self) -> None:
        """Close after `commit`; a commit still in flight (after a failure) is let end,
        not applied: RocksDB is only a cache of the log, and the restart replays it."""
        self.committer.close()
        self.store.close()
        self.producer.flush(5)
        if self._reads_producer is not None:
            self._reads_producer.flush(5)

    def _drop_store(self) -> None:
        """Damage found while running: wipe the store, so the restart that follows this
        failure rebuilds it from a snapshot and the log instead of tripping on it again."""
        log.error("state store of partition %d is damaged; wiping it for a rebuild", self.partition)
        with contextlib.suppress(StateStoreError):
            self.store.close()
        StateStore.wipe(self.state_dir)

    def _open_when_free(self) -> StateStore:
        """Open the store, waiting (bounded) while the engine that had this partition
        before a rebalance, in another worker on this host, has not closed it yet."""
        retrying = Retrying(
            retry=retry_if_exception_type(StateStoreLocked),
            stop=stop_after_delay(STORE_LOCK_WAIT_S),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            before_sleep=lambda s: log.info("p%d: store still locked, waiting", self.partition),
            reraise=True,
        )
        return retrying(StateStore.open, self.state_dir)

    def _open_store(self) -> StateStore:
        """The most advanced usable base: RocksDB as it stands, or the newest snapshot ahead
        of it. A corrupt store or snapshot is only a cache of the log: drop it and go on."""
        try:
            store = self._open_when_free()
        except StateStoreCorruption as e:
            log.warning("state store unusable (%s); rebuilding it", e)
            StateStore.wipe(self.state_dir)
            store = StateStore.open(self.state_dir)
        reached = store.offset(self.log_name)
        for offset, path in self.snapshots.newest_first():
            if reached is not None and reached >= offset:
                break
            store.close()
            try:
                StateStore.restore(path, self.state_dir)
                store = StateStore.open(self.state_dir)
            except StateStoreError as e:
                log.warning("snapshot %s unusable (%s); trying an older one", path, e)
                StateStore.wipe(self.state_dir)
                store = StateStore.open(self.state_dir)
                continue
            log.info("partition %d starts from snapshot %s", self.partition, path)
            break
        return store
