"""The Python client of a txstream app's coordinator: transactions and queries over Kafka.

Requests go to `<app>.oltp.in`; results come back on `<app>.oltp.out`, read committed, so
a result is seen only once what it reports is durable. One background thread reads the
results and completes the waiting futures; `submit` keeps many requests in flight.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import (
    idempotent_producer_config,
    read_committed_consumer_config,
    send,
)
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Key
from txstream.oltp.messages import (
    Fragment,
    Query,
    TxnRequest,
    TxnResult,
    Wire,
    WireDecodeError,
    key_json,
)
from txstream.oltp.predicates import Aggregate, Condition
from txstream.schemas.registry import SchemaRegistry

log = logging.getLogger(__name__)


class OltpTimeout(TimeoutError):
    """No result in time: the outcome is unknown (the coordinator may still finish it)."""


class TxClient:
    def __init__(self, app: str, settings: Settings | None = None, timeout_s: float = 30.0):
        self.settings = settings or Settings()
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
        out = TopicPartition(self.topics.oltp_out, 0)
        _, high = self.consumer.get_watermark_offsets(out, timeout=30)
        self.consumer.assign([TopicPartition(self.topics.oltp_out, 0, high)])
        self._reader = threading.Thread(target=self._read, name="txclient-results", daemon=True)
        self._reader.start()

    def __enter__(self) -> TxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(
        self,
        fragments: Sequence[Fragment] = (),
        query: Query | None = None,
        timeout_s: float | None = None,
    ) -> Future[TxnResult]:
        """Send one transaction (fragments, run atomically) or one query; do not wait."""
        request_id = uuid.uuid4().hex
        future: Future[TxnResult] = Future()
        with self._lock:
            self._pending[request_id] = future
        timeout_ms = int((timeout_s or self.timeout_s) * 1000)
        req = TxnRequest(request_id, self.topics.oltp_out, timeout_ms, list(fragments), query)
        send(self.producer, self.topics.oltp_in, self.wire.encode(req), partition=0)
        self.producer.poll(0)
        return future

    def call(self, fragments: Sequence[Fragment], timeout_s: float | None = None) -> TxnResult:
        return self.wait(self.submit(fragments, timeout_s=timeout_s), timeout_s)

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
        try:
            # The coordinator's own timeout answers first; this one covers its absence.
            return future.result((timeout_s or self.timeout_s) + 30)
        except FutureTimeout as e:
            raise OltpTimeout("no result from the coordinator: is it running?") from e

    def _read(self) -> None:
        while not self._stop.is_set():
            for msg in self.consumer.consume(500, timeout=0.005):  # waits out the timeout
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
        self._stop.set()
        self._reader.join(5)
        self.consumer.close()
        self.producer.flush(10)


def fragment(key: Key | int | str, procedure: str, **params: Any) -> Fragment:
    """One call of a registered transaction, routed by `key`."""
    return Fragment.call(key, procedure, **params)
