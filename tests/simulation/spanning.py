"""A seeded simulation of spanning procedures across P partition engines.

The order pipeline runs on P real `PartitionEngine`s over in-memory committed state. The
logs stand in for Kafka topics: the events stream is the same on every partition (the
loader broadcasts it), the catalogue and accounts are placed by the routing function, and
each engine's exchange partition receives the other engines' reads when their task sends
them, outside any transaction, some steps later, but before the group that holds the batch
commits. The seed picks which engine acts next, whether it takes a record, sends or
commits, and when an engine crashes (its uncommitted group and unsent reads are lost, and a
new engine starts from its committed state and positions, as a restarted worker does).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from orders.dataflow import build_app
from orders.files import Shop
from orders.loader import event_batches
from orders.result import Result
from orders.results import from_outcomes
from txstream.engine.group import Group
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.routing import partition_of
from txstream.model.declarations import Record
from txstream.testing import MemoryState

EXCHANGE = "exchange"


@dataclass
class _Node:
    """One engine and what its (simulated) task holds in memory."""

    engine: PartitionEngine
    received: dict[str, int] = field(default_factory=dict)


class SpanningSim:
    def __init__(self, shop: Shop, partitions: int, batch_size: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.app = build_app()
        self.df = self.app.dataflow()
        self.crashes = 0
        # topic -> partition -> records (stream, batch id, tuples) or Reads
        self.logs: dict[str, list[list[Any]]] = {
            t: [[] for _ in range(partitions)] for t in ("items_in", "accounts_in", "events")
        }
        self.logs[EXCHANGE] = [[] for _ in range(partitions)]
        for i, item in enumerate(shop.items.values(), 1):
            row = {"item": item.item, "price": item.price, "stock": item.stock, "sold": 0}
            self.logs["items_in"][self._owner((item.item,))].append(("items_in", i, [row]))
        for i, c in enumerate(shop.customers.values(), 1):
            row = {"customer": c.customer, "balance": c.balance}
            self.logs["accounts_in"][self._owner((c.customer,))].append(("accounts_in", i, [row]))
        for b, tuples in enumerate(event_batches(shop, batch_size), 1):
            for p in range(partitions):
                self.logs["events"][p].append(("events", b, tuples))
        self.events = len(shop.events)
        self.bases = [MemoryState() for _ in range(partitions)]
        self.nodes = [self._start(p) for p in range(partitions)]
        self.outcomes: list[Record] = []

    def _owner(self, key: Any) -> int:
        return partition_of(key, self.partitions)

    def _start(self, p: int) -> _Node:
        engine = PartitionEngine(self.df, self.bases[p], p, {}, owner=self._owner)
        return _Node(engine, {t: engine.position(t) for t in self.logs})

    def _loaded(self, node: _Node, p: int) -> bool:
        return all(node.received[t] >= len(self.logs[t][p]) for t in ("items_in", "accounts_in"))

    def _choices(self, p: int) -> list[str]:
        node, engine = self.nodes[p], self.nodes[p].engine
        out = []
        if node.received[EXCHANGE] < len(self.logs[EXCHANGE][p]):
            out.append(EXCHANGE)
        if engine.waiting is None:
            for t in ("items_in", "accounts_in"):
                if node.received[t] < len(self.logs[t][p]):
                    out.append(t)
            # events wait for the loads, as `txstream orders run` waits for them
            if self._all_loaded() and node.received["events"] < len(self.logs["events"][p]):
                out.append("events")
        return out

    def _all_loaded(self) -> bool:
        return all(self._committed_loaded(p) for p in range(self.partitions))

    def _committed_loaded(self, p: int) -> bool:
        engine = PartitionEngine(self.df, self.bases[p], p, {}, owner=self._owner)
        return all(engine.position(t) >= len(self.logs[t][p]) for t in ("items_in", "accounts_in"))

    def _deliver(self, p: int, topic: str) -> None:
        node = self.nodes[p]
        offset = node.received[topic]
        node.received[topic] = offset + 1
        record = self.logs[topic][p][offset]
        if topic == EXCHANGE:
            node.engine.receive(record, (topic, p, offset))
        else:
            stream, batch_id, tuples = record
            node.engine.process(stream, batch_id, [dict(t) for t in tuples], (topic, p, offset))

    def _commit(self, p: int) -> None:
        self._send(p)  # the task has every read delivered before a group commits
        group: Group = self.nodes[p].engine.take_group()
        self.bases[p].apply(group)
        for out in group.outputs:
            self.outcomes.extend(out.tuples)

    def _send(self, p: int) -> None:
        """The task sends an engine's reads at once, outside its group's transaction."""
        outbox = self.nodes[p].engine.outbox
        for q, reads in outbox:
            self.logs[EXCHANGE][q].append(reads)
        outbox.clear()

    def _crash(self, p: int) -> None:
        self.crashes += 1
        self.nodes[p] = self._start(p)

    def run(self, crash_rate: float = 0.0, max_crashes: int = 8, max_steps: int = 200_000) -> None:
        """Random steps until every batch is committed everywhere; at most `max_crashes`
        crashes, each step crashing an engine with probability `crash_rate`."""
        for _ in range(max_steps):
            if self._done():
                return
            p = self.rng.randrange(self.partitions)
            roll = self.rng.random()
            if roll < crash_rate and self.crashes < max_crashes:
                self._crash(p)
                continue
            if self.nodes[p].engine.outbox and roll < 0.5:
                self._send(p)  # or later: a crash before it loses the reads unsent
                continue
            choices = self._choices(p)
            if not choices or roll < 0.2:
                if not self.nodes[p].engine.group.empty:
                    self._commit(p)
                continue
            self._deliver(p, self.rng.choice(choices))
        raise AssertionError(f"no progress after {max_steps} steps: {self._where()}")

    def _done(self) -> bool:
        last = len(self.logs["events"][0])
        for p, node in enumerate(self.nodes):
            engine = node.engine
            if not engine.group.empty or engine.waiting is not None or engine.outbox:
                return False
            if engine.position("events") < last or not self._committed_loaded(p):
                return False
        return True

    def _where(self) -> str:
        return ", ".join(
            f"p{p}: events at {n.engine.position('events')}, waiting "
            f"{None if n.engine.waiting is None else n.engine.waiting.batch_id}"
            for p, n in enumerate(self.nodes)
        )

    def result(self) -> Result:
        """The result document from the committed outcomes and every engine's state."""
        tables: dict[str, dict[Any, Record]] = {}
        for base in self.bases:
            for table, rows in base.tables.items():
                tables.setdefault(table, {}).update(rows)
        return from_outcomes(self.outcomes, tables, self.events)

    def exchanged(self) -> int:
        return sum(len(log) for log in self.logs[EXCHANGE])
