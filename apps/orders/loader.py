"""Put the shop on Kafka as a user's producer would: atomic batches, placed by key.

Items and accounts go to the partition owning their key (the library's routing function),
so each engine loads its own share. The events stream is read by a spanning procedure, so
each batch of events goes to every partition: every engine sees the whole sequence.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from confluent_kafka import Producer

from orders.files import Event, Order, Restock, Shop, batches
from txstream.config import Settings
from txstream.kafka.clients import send, transactional_producer_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.declarations import Record
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry

ROWS_PER_BATCH = 1_000


def event_record(seq: int, event: Event) -> Record:
    """An event line as a tuple of the events stream; `seq` is its place in the input."""
    if isinstance(event, Order):
        return {"seq": seq, "kind": "O", "order_id": event.order_id,
                "customer": event.customer, "item": event.item, "amount": event.qty}  # fmt: skip
    if isinstance(event, Restock):
        return {"seq": seq, "kind": "R", "order_id": None, "customer": None,
                "item": event.item, "amount": event.qty}  # fmt: skip
    return {"seq": seq, "kind": "T", "order_id": None, "customer": event.customer,
            "item": None, "amount": event.amount}  # fmt: skip


def event_batches(shop: Shop, batch_size: int) -> list[list[Record]]:
    """The events as the stream's batches: batch b (1-based) is list index b-1."""
    out, seq = [], 0
    for events in batches(shop.events, batch_size):
        tuples = []
        for event in events:
            tuples.append(event_record(seq, event))
            seq += 1
        out.append(tuples)
    return out


class ShopLoader:
    def __init__(self, settings: Settings, app: App, partitions: int) -> None:
        self.topics = AppTopics(app.name)
        self.partitions = partitions
        registry = SchemaRegistry(settings.schema_dir)
        self.codecs = {
            s.name: BatchCodec(registry.get(s.schema)) for s in app.decl.streams.values()
        }
        self.producer = Producer(
            {**transactional_producer_config(settings, f"loader-{app.name}"), "linger.ms": 5}
        )
        self.producer.init_transactions(60)

    def _send(self, stream: str, partition: int, batch_id: int, tuples: Sequence[Record]) -> None:
        value = self.codecs[stream].encode(stream, batch_id, list(tuples))
        send(self.producer, self.topics.stream(stream), value, partition=partition)

    def load_catalogue(self, shop: Shop) -> dict[str, list[int]]:
        """Items and accounts, each on its key's partition, in one transaction. Returns
        {stream: last batch id per partition} (0 where a partition got none)."""
        rows: dict[str, list[list[Record]]] = {
            "items_in": [[] for _ in range(self.partitions)],
            "accounts_in": [[] for _ in range(self.partitions)],
        }
        for i in shop.items.values():
            row = {"item": i.item, "price": i.price, "stock": i.stock, "sold": 0}
            rows["items_in"][partition_of((i.item,), self.partitions)].append(row)
        for c in shop.customers.values():
            row = {"customer": c.customer, "balance": c.balance}
            rows["accounts_in"][partition_of((c.customer,), self.partitions)].append(row)
        last: dict[str, list[int]] = {s: [0] * self.partitions for s in rows}
        self.producer.begin_transaction()
        for stream, per_partition in rows.items():
            for p, part_rows in enumerate(per_partition):
                for start in range(0, len(part_rows), ROWS_PER_BATCH):
                    last[stream][p] += 1
                    self._send(
                        stream, p, last[stream][p], part_rows[start : start + ROWS_PER_BATCH]
                    )
        self.producer.commit_transaction()
        return last

    def load_events(
        self,
        event_batches: list[list[Record]],
        progress: Callable[[int], None] | None = None,
        commit_every: int = 2_000,
    ) -> int:
        """Every batch to every partition, committed in transactions of `commit_every`
        batches; `progress` is told the last batch id of each. Returns the last batch id."""
        last = 0
        self.producer.begin_transaction()
        for batch_id, tuples in enumerate(event_batches, 1):
            for p in range(self.partitions):
                self._send("events", p, batch_id, tuples)
            last = batch_id
            if last % commit_every == 0:
                self.producer.commit_transaction()
                if progress is not None:
                    progress(last)
                self.producer.begin_transaction()
        self.producer.commit_transaction()
        if progress is not None:
            progress(last)
        return last

    def load_paced(
        self, event_batches: list[list[Record]], rate: float, sent: Callable[[int, float], None]
    ) -> None:
        """Every batch to every partition at `rate` batches per second, each told to
        `sent(batch id, monotonic time it was due)`; a transaction commits every 5 ms at
        most, so latency measured from the due time includes the producer's share."""
        started = last_commit = time.monotonic()
        self.producer.begin_transaction()
        for batch_id, tuples in enumerate(event_batches, 1):
            due = started + (batch_id - 1) / rate
            time.sleep(max(0.0, due - time.monotonic()))
            for p in range(self.partitions):
                self._send("events", p, batch_id, tuples)
            sent(batch_id, due)
            if time.monotonic() - last_commit >= 0.005:
                self.producer.commit_transaction()
                self.producer.begin_transaction()
                last_commit = time.monotonic()
        self.producer.commit_transaction()
