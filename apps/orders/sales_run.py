"""The sales app (`orders.sales`, a repartitioned edge) on the real stack, for the tests and
the benchmark: supervised workers, order events produced by customer with progress marks,
and what the engines committed read back."""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from orders.commits import CommitWatch
from orders.sales import Counts, build_app
from txstream.config import Settings
from txstream.engine.hops import PROGRESS
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import (
    idempotent_producer_config,
    read_committed_consumer_config,
    send,
)
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.declarations import Record
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.supervisor import Policy, Supervised
from txstream.state.codec import StateCodec


def sales_events(seed: int, n: int) -> list[Record]:
    """`n` orders from 25 customers for 40 items; order ids repeat (about half are new)."""
    rng = random.Random(seed)
    return [
        {"seq": i, "kind": "O", "order_id": rng.randrange(n // 2 + 1),
         "customer": rng.randrange(25), "item": rng.randrange(40), "amount": rng.randrange(0, 5)}
        for i in range(n)
    ]  # fmt: skip


def by_item(totals: list[Record]) -> dict[int, list[Record]]:
    """Running totals by item, each item's in the order read."""
    out: dict[int, list[Record]] = {}
    for t in totals:
        out.setdefault(t["item"], []).append(t)
    return out


MARK_EVERY_S = 0.02  # a paced producer's progress marks


class SalesRun:
    def __init__(
        self, settings: Settings, partitions: int, workers: int, ordered: bool = True
    ) -> None:
        self.settings, self.partitions = settings, partitions
        self.app = build_app(f"sales-{uuid.uuid4().hex[:10]}", ordered)
        self.topics = AppTopics(self.app.name)
        self.producer = Producer(idempotent_producer_config(settings))
        self.batches = 0
        ensure_app_topics(TopicAdmin(settings), self.app, partitions)
        registry = SchemaRegistry(settings.schema_dir)
        self.codec = BatchCodec(registry.get("orders.Event"))
        self.state_codec = StateCodec(self.app.dataflow(), registry)
        txstream = str(Path(sys.executable).with_name("txstream"))
        argv = [txstream, "worker", "run", "--app", "orders.sales:from_params",
                "--params", json.dumps({"name": self.app.name, "ordered": ordered}),
                "--no-metrics"]  # fmt: skip
        policy = Policy(max_restarts=100, window_s=60.0, backoff_ms=100, backoff_max_ms=1000)
        self.services = [
            Supervised(f"worker-{i}", [*argv, "--instance-id", str(i)], settings, policy=policy)
            for i in range(workers)
        ]

    def start(self) -> None:
        for s in self.services:
            s.start()

    def stop(self) -> None:
        for s in reversed(self.services):
            s.stop()

    def produce(
        self,
        events: list[Record],
        batch_size: int,
        rate: float | None = None,
        due: dict[int, float] | None = None,
    ) -> None:
        """The next batches (ids go on from the last call's), each placed by customer, one
        record per partition, then a progress mark to every partition. At `rate` batches/s
        they are paced, with a progress mark every MARK_EVERY_S, and each event's due time
        (monotonic) goes into `due` by its seq (unpaced, events have no due time)."""
        topic = self.topics.stream("sales_events")
        started = marked = time.monotonic()
        for i, start in enumerate(range(0, len(events), batch_size)):
            due_at = None if rate is None else started + i / rate
            wait = 0.0 if due_at is None else due_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing the load, not waiting for a condition
            self.batches += 1
            placed: dict[int, list[Record]] = {}
            for e in events[start : start + batch_size]:
                placed.setdefault(partition_of((e["customer"],), self.partitions), []).append(e)
                if due is not None and due_at is not None:
                    due[e["seq"]] = due_at
            for p, tuples in sorted(placed.items()):
                record = self.codec.encode("sales_events", self.batches, tuples)
                send(self.producer, topic, record, partition=p)
            if rate is not None and time.monotonic() - marked >= MARK_EVERY_S:
                self._mark(topic)
                marked = time.monotonic()
            self.producer.poll(0)
        # every batch so far is sent: a progress mark to every partition lets the ordered
        # edge run the parts of the last batches, which some engines had no part of
        self._mark(topic)
        assert self.producer.flush(60) == 0

    def _mark(self, topic: str) -> None:
        mark = self.codec.encode(PROGRESS, self.batches, [])
        for p in range(self.partitions):
            send(self.producer, topic, mark, partition=p)

    def wait_committed(self, timeout_s: float, last: int | None = None) -> None:
        """Until every engine's ordered inbox has run every part up to batch `last` (by
        default the last one `produce` sent), from the commit notices (an ordered edge
        reports how far its inbox has come)."""
        watch = CommitWatch(self.settings, self.topics.commits, self.partitions)
        try:
            targets = {"accepted_orders": [last or self.batches] * self.partitions}
            watch.wait(targets, timeout_s, self.alive)
        finally:
            watch.close()

    def wait_totals(
        self, parts: int, timeout_s: float, due: dict[int, float] | None = None
    ) -> list[float]:
        """Until `parts` records of running totals have committed (one per `tally` TE,
        `sales.tally_runs`), for either kind of edge. With `due` (seq -> due time), each
        total's delay from its event's due time to its commit being seen, in ms; else nothing
        is decoded."""
        topic = self.topics.stream("item_totals")
        conf = read_committed_consumer_config(self.settings, f"sales-{uuid.uuid4().hex}")
        consumer = Consumer(conf)
        consumer.assign([TopicPartition(topic, q, 0) for q in range(self.partitions)])
        codec = BatchCodec(SchemaRegistry(self.settings.schema_dir).get("orders.ItemTotal"))
        seen, delays, deadline = 0, [], time.monotonic() + timeout_s
        try:
            while seen < parts:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{seen} of {parts} parts committed in {timeout_s:.0f}s")
                if not self.alive():
                    raise RuntimeError("a worker's supervisor is gone; see its log")
                for msg in consumer.consume(1000, timeout=0.01):
                    if msg.error() is not None:
                        continue
                    seen += 1
                    if due is not None:
                        now = time.monotonic()
                        for t in codec.decode(msg.value() or b"").tuples:
                            if t["seq"] in due:  # not a warm-up event's
                                delays.append((now - due[t["seq"]]) * 1000)
        finally:
            consumer.close()
        return delays

    def counts(self) -> dict[str, Counts]:
        tables = committed_tables(
            self.settings, self.state_codec, self.topics.changelog, self.partitions
        )
        return {
            name: {int(k[0]): (r["orders"], r["units"]) for k, r in tables.get(name, {}).items()}
            for name in ("customer_sales", "item_sales")
        }

    def wait_for(
        self, want: dict[str, Counts], timeout_s: float, alive: Callable[[], bool]
    ) -> None:
        """Until the committed tables are `want`; a worker that stays down fails it early."""
        deadline = time.monotonic() + timeout_s
        got: dict[str, Counts] = {}
        while time.monotonic() < deadline:
            got = self.counts()
            if got == want:
                return
            if not alive():
                raise AssertionError("a worker is down and not restarting")
            time.sleep(0.5)
        raise AssertionError(f"committed counts never reached the reference: {got} != {want}")

    def alive(self) -> bool:
        return all(s.supervisor.live_pid() is not None for s in self.services)

    def item_totals(self) -> list[Record]:
        """Every committed running total `tally` emitted, engine by engine."""
        codec = BatchCodec(SchemaRegistry(self.settings.schema_dir).get("orders.ItemTotal"))
        topic = self.topics.stream("item_totals")
        return [
            t
            for q in range(self.partitions)
            for msg in read_to_committed_end(self.settings, topic, q)
            for t in codec.decode(msg.value() or b"").tuples
        ]

    def hop_parts(self) -> list[list[tuple[int, int, list[Record]]]]:
        """Per partition of tally's topic: (sender, batch id, tuples) of each part (markers
        left out), in log order."""
        out = []
        for q in range(self.partitions):
            parts = []
            for msg in read_to_committed_end(self.settings, self.topics.hop("tally"), q):
                batch = self.codec.decode(msg.value() or b"")
                if batch.tuples:  # not a progress marker
                    parts.append((int(msg.key() or b"-1"), batch.batch_id, list(batch.tuples)))
            out.append(parts)
        return out
