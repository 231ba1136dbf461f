"""Put the shop on Kafka as a user's producer would: atomic batches, placed by key.

Items and accounts go to the partition owning their key (the library's routing function),
so each engine loads its own share. The events stream is read by a spanning procedure: the
producer sends each batch of events to the partitions owning a key it declares, with a
progress mark to the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from orders.files import Event, Order, Restock, Shop, batches
from txstream import BatchProducer
from txstream.config import Settings
from txstream.kafka.routing import partition_of
from txstream.model.app import App
from txstream.model.declarations import Record

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
    """The shop's input, sent by the public `BatchProducer` (schema-checked rows, placed by
    key, in transactions)."""

    def __init__(self, settings: Settings, app: App, partitions: int) -> None:
        self.partitions = partitions
        self.producer = BatchProducer(app, settings)

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
        with self.producer.transaction():
            for stream, per_partition in rows.items():
                for p, part_rows in enumerate(per_partition):
                    for start in range(0, len(part_rows), ROWS_PER_BATCH):
                        chunk = part_rows[start : start + ROWS_PER_BATCH]
                        last[stream][p] = self.producer.send(stream, chunk)
        return last

    def load_events(
        self,
        event_batches: list[list[Record]],
        progress: Callable[[int], None] | None = None,
        commit_every: int = 2_000,
    ) -> int:
        """Every batch (to the partitions it touches: the stream is a spanning procedure's
        input), committed in transactions of `commit_every` batches; `progress` is told the last
        batch id of each. Returns the last batch id."""
        last = 0
        for start in range(0, len(event_batches), commit_every):
            with self.producer.transaction():
                for offset, tuples in enumerate(event_batches[start : start + commit_every]):
                    last = self.producer.send("events", tuples, batch_id=start + offset + 1)
            if progress is not None:
                progress(last)
        return last

    def load_paced(
        self, event_batches: list[list[Record]], rate: float, sent: Callable[[int, float], None]
    ) -> None:
        """Every batch at `rate` batches per second, each told to `sent(batch id, monotonic
        time it was due)`; a transaction commits every 5 ms at most, so latency measured
        from the due time includes the producer's share."""
        started = time.monotonic()
        pending = iter(enumerate(event_batches, 1))
        more = True
        while more:
            more = False
            with self.producer.transaction():
                commit_at = time.monotonic() + 0.005
                for batch_id, tuples in pending:
                    due = started + (batch_id - 1) / rate
                    time.sleep(max(0.0, due - time.monotonic()))
                    self.producer.send("events", tuples, batch_id=batch_id)
                    sent(batch_id, due)
                    if time.monotonic() >= commit_at:
                        more = True
                        break
