"""The Python client of a txstream app: transactions and queries over Kafka.

A transaction whose fragments all run on one partition goes straight to that partition's
engine (`<app>.promises`, kind `direct`), which runs it in its serial order and answers the
client with its group commit: no coordinator on its path. Multi-partition transactions
(2PC) and queries go to the coordinator (`<app>.oltp.in`). Every answer comes back on
`<app>.oltp.out`, read committed, so a result is seen only once what it reports is durable.
One background thread reads the results and completes the waiting futures; `submit` keeps
many requests in flight. A promised (BASIC) transaction goes to its partition's log too:
the broker's acknowledgement is the promise, and the final status comes later on the same
results topic (`engine.promises`, `docs/consistency.md`).
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from time import perf_counter
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from txstream.config import Settings
from txstream.in_flight import InFlight
from txstream.kafka.clients import (
    idempotent_producer_config,
    read_committed_consumer_config,
    send,
)
from txstream.kafka.owners import WorkerGroup, worker_group
from txstream.kafka.routing import fragment_partition
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Key
from txstream.oltp.messages import (
    EngineRequest,
    Fragment,
    Query,
    TxnRequest,
    TxnResult,
    Wire,
    WireDecodeError,
    key_json,
    reply_partition,
    request_id_for,
)
from txstream.oltp.predicates import Aggregate, Condition
from txstream.pending import OltpTimeout, Pending, Promise
from txstream.read_client import CommittedRow, ReadClient
from txstream.schemas.registry import SchemaRegistry

log = logging.getLogger(__name__)

__all__ = [
    "READ_GRACE_S",
    "OltpTimeout",
    "Pending",
    "Promise",
    "TxClient",
    "fragment",
]

# A read's answer is waited for this long past its own timeout, which the reader enforces.
READ_GRACE_S = 5.0
# The reply reader's longest wait for an answer before it looks for a stop or a partition
# to hear again.
READ_WAKE_S = 0.1
# Requests one client keeps in flight by default; past that a send waits for an answer.
MAX_IN_FLIGHT = 4096


class TxClient:
    def __init__(
        self,
        app: str,
        settings: Settings | None = None,
        timeout_s: float = 30.0,
        direct: bool = True,
        reply_partition: int | None = None,
        max_in_flight: int = MAX_IN_FLIGHT,
        direct_via: str = "kafka",
    ) -> None:
        """`direct`: single-partition transactions go straight to their partition's engine
        (False sends every request through the coordinator, as before that path existed);
        `direct_via`: how they go there, through its Kafka input ("kafka": the request is
        durable once sent, and runs even if this client dies), or over HTTP to the
        endpoint of the worker that owns it ("endpoint": no Kafka record either way, so
        fewer hops and less broker work; a request the worker had not committed when it
        died is sent again to the next owner, under its id, and runs once).
        `reply_partition`: the partition of the reply topic this client reads; one at
        random by default, so clients spread over them. `max_in_flight`: requests sent
        and not yet answered; a send beyond it waits for an answer (back-pressure)."""
        if direct_via not in ("kafka", "endpoint"):
            raise ValueError(f"direct_via {direct_via!r}: 'kafka' or 'endpoint'")
        self.in_flight = InFlight(max_in_flight, timeout_s)
        self.settings = settings or Settings()
        self.direct = direct
        self.direct_via = direct_via
        self.topics = AppTopics(app)
        self.timeout_s = timeout_s
        self.wire = Wire(SchemaRegistry(self.settings.schema_dir))
        self._pending: dict[str, Future[TxnResult]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.producer = Producer({**idempotent_producer_config(self.settings), "linger.ms": 1})
        self.consumer = Consumer(
            read_committed_consumer_config(self.settings, f"client-{uuid.uuid4().hex}")
        )
        # Answers to this client go to one partition of the reply topic, named in its
        # request ids (`reply_partition`): it reads that one, not every client's answers.
        partitions = self._topic_partitions(self.topics.oltp_out)
        self._reply_partitions = partitions
        if reply_partition is not None and not 0 <= reply_partition < partitions:
            raise ValueError(
                f"reply_partition {reply_partition}: {self.topics.oltp_out} has partitions "
                f"0..{partitions - 1}"
            )
        if reply_partition is None:
            reply_partition = secrets.randbelow(partitions)
        self.reply_partition = reply_partition
        # Partitions the reader thread is asked to read too, each with an event it sets once
        # it does: only that thread touches the consumer (a call from another thread waits
        # on the consumer's lock, which the reader's loop takes again at once).
        self._to_listen: deque[tuple[int, threading.Event]] = deque()
        self._listening: set[int] = set()
        self._listen(self.reply_partition, assign=True)
        self._reader = threading.Thread(target=self._read, name="txclient-results", daemon=True)
        self._reader.start()
        self._partitions: int | None = None
        self._read_client: ReadClient | None = None
        self._workers = WorkerGroup(self.settings, app)  # asked when a call times out
        # serves the producer's delivery reports at once: each one completes a promise
        self._poller = threading.Thread(target=self._poll, name="txclient-acks", daemon=True)
        self._poller.start()

    def listening(self) -> set[int]:
        """The partitions of the reply topic this client reads."""
        with self._lock:
            return set(self._listening)

    def _topic_partitions(self, name: str) -> int:
        """How many partitions the app's topic `name` has (the producer asks: the consumer
        is the reader thread's alone)."""
        meta = self.producer.list_topics(name, timeout=30)
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise RuntimeError(
                f"no topic {name}: is app {self.topics.app!r} running (its workers and "
                "coordinator make its topics)?"
            )
        return len(topic.partitions)

    def _placement(self, fragments: Sequence[Fragment]) -> set[int]:
        """The partitions the fragments' keys are on."""
        parts = self._partition_count()
        return {fragment_partition(f.key, parts) for f in fragments}

    def _listen(self, partition: int, assign: bool = False) -> None:
        """Read answers on `partition` of the reply topic from its end now on: in the
        constructor, or in the reader thread (`_hear`)."""
        tp = TopicPartition(self.topics.oltp_out, partition)
        _, high = self.consumer.get_watermark_offsets(tp, timeout=30)
        tp.offset = high
        if assign:
            self.consumer.assign([tp])
        else:
            self.consumer.incremental_assign([tp])
        with self._lock:
            self._listening.add(partition)

    def _hear(self, partition: int) -> None:
        """Have the reader thread read `partition` too, and wait until it does, so an answer
        sent there after this returns is heard."""
        with self._lock:
            if partition in self._listening:
                return
        done = threading.Event()
        self._to_listen.append((partition, done))
        if not done.wait(60):
            raise OltpTimeout(f"could not read partition {partition} of {self.topics.oltp_out}")

    def __enter__(self) -> TxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self,
        fragments: Sequence[Fragment] = (),
        query: Query | None = None,
        timeout_s: float | None = None,
        request_id: str | None = None,
    ) -> Pending:
        """Send one transaction (fragments, run atomically) or one query; do not wait.
        `request_id`: that of an earlier send whose outcome is unknown (`OltpTimeout`), to
        learn it; a new one by default."""
        partition = self._direct_partition(fragments) if query is None else None
        if partition is not None and self.direct_via == "endpoint":
            rid, timeout = request_id or request_id_for(self.reply_partition), timeout_s
            call: Pending = self.in_flight.hold(lambda: self._reads().direct(
                partition, rid, fragments, timeout or self.timeout_s))  # fmt: skip
            return call
        if request_id is None:
            request_id = request_id_for(self.reply_partition)
        else:  # another client's, perhaps: hear its answer where it goes
            self._hear(reply_partition(request_id, self._reply_partitions))
        future: Pending = self.in_flight.hold(lambda: Pending(request_id, partition))
        with self._lock:
            self._pending[request_id] = future
        if partition is not None:
            run = EngineRequest(f"p.{request_id}", 0, "direct", request_id,
                                self.topics.oltp_out, list(fragments))  # fmt: skip
            send(self.producer, self.topics.promises, self.wire.encode(run), partition=partition)
        else:
            timeout_ms = int((timeout_s or self.timeout_s) * 1000)
            req = TxnRequest(request_id, self.topics.oltp_out, timeout_ms, list(fragments), query)
            send(self.producer, self.topics.oltp_in, self.wire.encode(req), partition=0)
        self.producer.poll(0)
        return future

    def _direct_partition(self, fragments: Sequence[Fragment]) -> int | None:
        """The one partition all `fragments` run on, if they go there directly."""
        if not self.direct or not fragments:
            return None
        placed = self._placement(fragments)
        return placed.pop() if len(placed) == 1 else None

    def promise(self, fragments: Sequence[Fragment], level: str = "BASIC") -> Promise:
        """Send a promised transaction: no coordinator round before the promise. Its
        fragments run on one partition. BASIC: aggregation constraints are checked when it
        is serialized, and `Promise.status()` tells how that ended. BASE: it commits on its
        partition when run, nothing serialized, and may not change summed fields
        (`docs/consistency.md`)."""
        kinds = {"BASIC": "promise", "BASE": "base"}
        if level.upper() not in kinds:
            raise ValueError(f"level {level!r}: a promise is BASIC or BASE (ACID is `call`)")
        placed = self._placement(fragments)
        if len(placed) != 1:
            raise ValueError(
                "a promised transaction runs on one partition: give it at least one "
                f"fragment, all with keys on one partition (these are on {sorted(placed)})"
            )
        request_id = request_id_for(self.reply_partition)
        durable: Future[float] = Future()
        final: Future[TxnResult] = Future()
        with self._lock:
            self._pending[request_id] = final
        kind = kinds[level.upper()]
        # the engine names it by its place in the promises topic; the reply, by request id
        req = EngineRequest(
            f"p.{request_id}", 0, kind, request_id, self.topics.oltp_out, list(fragments)
        )
        started = perf_counter()

        def acknowledged(err: KafkaError | None, _: Message) -> None:
            if err is None:
                durable.set_result(perf_counter() - started)
                return
            with self._lock:
                self._pending.pop(request_id, None)
            problem = RuntimeError(f"promise not written to {self.topics.promises}: {err}")
            durable.set_exception(problem)
            final.set_exception(problem)

        send(self.producer, self.topics.promises, self.wire.encode(req), partition=placed.pop(),
             on_delivery=acknowledged)  # fmt: skip
        return Promise(request_id, durable, final)

    def _partition_count(self) -> int:
        if self._partitions is None:
            self._partitions = self._topic_partitions(self.topics.promises)
        return self._partitions

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.05)

    def call(
        self,
        fragments: Sequence[Fragment],
        timeout_s: float | None = None,
        request_id: str | None = None,
        read_only: bool = False,
    ) -> TxnResult:
        """Run one transaction and wait for its outcome (`submit`, then `wait`); with
        `read_only`, on the committed state of its partition's worker (`submit_read_only`)."""
        if read_only:
            timeout = timeout_s or self.timeout_s
            return self.submit_read_only(fragments, timeout).result(timeout + READ_GRACE_S)
        future = self.submit(fragments, timeout_s=timeout_s, request_id=request_id)
        return self.wait(future, timeout_s)

    def read(
        self, table: str, key: Key | int | str, timeout_s: float | None = None
    ) -> CommittedRow:
        """The row of `table` at `key` as its partition has committed it, from the worker
        that owns it: no Kafka transaction, serializable for that partition, and showing
        this client's acknowledged writes. Raises `ReadUnavailable` if no worker answers,
        `ValueError` for a table the app does not have."""
        timeout = timeout_s or self.timeout_s
        return self.submit_read(table, key, timeout).result(timeout + READ_GRACE_S)

    def submit_read(
        self, table: str, key: Key | int | str, timeout_s: float | None = None
    ) -> Future[CommittedRow]:
        """`read`, without waiting: the future holds the row, or the error."""
        return self._reads().row(table, key, timeout_s or self.timeout_s)

    def submit_read_only(
        self, fragments: Sequence[Fragment], timeout_s: float | None = None
    ) -> Future[TxnResult]:
        """Send read-only fragments, all on one partition, to the worker that owns it,
        which runs them on its committed state between groups (no Kafka transaction); one
        that writes fails (`read_only`). The future's result is "committed" when it ran,
        or `ReadUnavailable` if no worker answered. Counts against `max_in_flight`."""
        timeout = timeout_s or self.timeout_s
        future: Future[TxnResult] = self.in_flight.hold(
            lambda: self._reads().call(fragments, timeout)
        )
        return future

    def _reads(self) -> ReadClient:
        with self._lock:
            if self._read_client is None:
                self._read_client = ReadClient(self.settings, self.topics.app)
            return self._read_client

    def query(
        self,
        table: str,
        key: Key | None = None,
        where: Iterable[Condition] = (),
        isolation: str = "snapshot",
        aggregates: Iterable[Aggregate] = (),
        timeout_s: float | None = None,
    ) -> TxnResult:
        """Rows of `table` (one key, or all matching `where`), or with `aggregates` one row
        of totals. `snapshot` is consistent with 2PC transactions across partitions, and
        reads every engine as of one batch of the app's spanning stream (`TxnResult.at`),
        the oldest any engine had run; `serializable` cuts at the newest, so it holds every
        batch committed before it came; `read_committed` reads each engine as it stands."""
        q = Query(
            table,
            isolation,
            None if key is None else key_json(key),
            json.dumps([list(c) for c in where]),
            json.dumps([list(a) for a in aggregates]),
        )
        return self.wait(self.submit(query=q, timeout_s=timeout_s), timeout_s)

    def wait(self, future: Future[TxnResult], timeout_s: float | None = None) -> TxnResult:
        # No flush: linger.ms sends the request within 1 ms, and a flush here cost each
        # wait a broker round trip, which capped a client with many requests in flight.
        timeout = timeout_s or self.timeout_s
        partition = future.partition if isinstance(future, Pending) else None
        if partition is None:
            timeout += 30  # the coordinator's own timeout answers first; this covers its absence
        try:
            return future.result(timeout)
        except FutureTimeout as e:
            raise (self.not_running(future) or self.unanswered(future, timeout)) from e

    def not_running(self, future: Future[TxnResult]) -> OltpTimeout | None:
        """For a direct transaction unanswered in its timeout: the error that says no
        worker of the app is running, if none is, else None (also when the broker cannot
        say). The timeout is kept whole: a worker may be restarting meanwhile."""
        if not isinstance(future, Pending) or future.partition is None:
            return None
        app = self.topics.app
        try:
            if self._workers.members(5.0):
                return None
        except Exception:  # the group cannot be described now: wait for the answer
            return None
        return OltpTimeout(
            f"no answer: no worker of app {app!r} is running (its consumer group "
            f"{worker_group(app)} has no member); start one with `txstream worker run`. The "
            f"request waits in {self.topics.promises} and runs once one does: call again "
            f"with request_id={future.request_id!r} to learn its outcome",
            future.request_id,
        )

    def unanswered(self, future: Future[TxnResult], timeout_s: float) -> OltpTimeout:
        """The error for `future` unanswered after `timeout_s`: what may have happened, and
        how to learn its outcome."""
        partition = future.partition if isinstance(future, Pending) else None
        if partition is None:
            return OltpTimeout("no result from the coordinator: is it running?")
        request_id = future.request_id if isinstance(future, Pending) else "?"
        return OltpTimeout(
            f"no answer in {timeout_s:.0f} s from the engine of partition {partition} of "
            f"{self.topics.app}: is a worker of the app running? The outcome is unknown: "
            f"call again with request_id={request_id!r} to learn it (it runs once at most)",
            request_id,
        )

    def _read(self) -> None:
        while not self._stop.is_set():
            while self._to_listen:
                partition, done = self._to_listen.popleft()
                try:
                    self._listen(partition)
                except KafkaException as e:  # the caller waits on, and times out
                    log.warning("cannot read partition %d of the reply topic: %s", partition, e)
                    continue
                done.set()
            # Block until the first answer (or a tenth of a second, to see a stop or a
            # partition to hear), then take what else is queued without waiting: an idle
            # client wakes 10 times a second, not 200 (many client processes share a CPU).
            first = self.consumer.poll(READ_WAKE_S)
            if first is None:
                continue
            for msg in [first, *self.consumer.consume(500, timeout=0)]:
                if msg.error() is not None or not msg.value():
                    continue
                try:
                    result = self.wire.decode(TxnResult, msg.value() or b"")
                except WireDecodeError as e:  # anyone can write to the topic: read past it
                    log.warning("skipping %s@%s: %s", msg.topic(), msg.offset(), e)
                    continue
                with self._lock:
                    future = self._pending.pop(result.request_id, None)
                if future is not None:
                    future.set_result(result)

    def close(self) -> None:
        if self._read_client is not None:
            self._read_client.close()
        self._stop.set()
        self._reader.join(5)
        self._poller.join(5)
        self.consumer.close()
        self.producer.flush(10)


def fragment(key: Key | int | str, procedure: str, **params: Any) -> Fragment:
    """One call of a registered transaction, routed by `key`."""
    return Fragment.call(key, procedure, **params)
