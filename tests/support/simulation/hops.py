"""A seeded simulation of repartitioned edges across P partition engines.

The sales app (`orders.sales`) runs on P real `PartitionEngine`s over in-memory committed
state. Lists stand in for its two topics, one list per partition: the order events, placed
by customer, with the producer's progress marks among them; and `tally`'s topic, to which a
group's parts and markers are appended, with the engine that sent them, only when that
group commits (as its Kafka transaction makes them visible). The seed picks which engine
acts next, whether it takes a record (from either topic) or commits, and when an engine
crashes: its uncommitted group is lost, and a new engine starts from the committed state
and positions, as a restarted worker does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from orders.sales import build_app
from txstream.engine.hops import PROGRESS
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.routing import partition_of
from txstream.model.declarations import Key, Record
from txstream.testing import MemoryState

EVENTS, HOP = "sales_events", "hop"


@dataclass
class _Node:
    engine: PartitionEngine
    received: dict[str, int] = field(default_factory=dict)


class HopCluster:
    def __init__(
        self, batches: list[list[Record]], partitions: int, seed: int, ordered: bool = True
    ) -> None:
        """`batches` go out in order, each placed by customer; after each, with some
        chance and after the last always, a progress mark goes to every partition."""
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.df = build_app(ordered=ordered).dataflow()
        self.crashes = 0
        # per partition: (kind, batch id, tuples) on the events topic, kind being the
        # envelope's stream; (sender, batch id, tuples) on HOP
        self.logs: dict[str, list[list[Any]]] = {
            t: [[] for _ in range(partitions)] for t in (EVENTS, HOP)
        }
        for batch_id, batch in enumerate(batches, 1):
            placed: dict[int, list[Record]] = {}
            for e in batch:
                placed.setdefault(self.owner((e["customer"],)), []).append(e)
            for p, tuples in placed.items():
                self.logs[EVENTS][p].append((EVENTS, batch_id, tuples))
            if batch_id == len(batches) or self.rng.random() < 0.3:
                for log in self.logs[EVENTS]:
                    log.append((PROGRESS, batch_id, []))
        self.bases = [MemoryState() for _ in range(partitions)]
        self.nodes = [self._start(p) for p in range(partitions)]
        self.totals: list[list[Record]] = [[] for _ in range(partitions)]  # committed, per engine

    def owner(self, key: Key) -> int:
        return partition_of(key, self.partitions)

    def _start(self, p: int) -> _Node:
        engine = PartitionEngine(
            self.df, self.bases[p], p, {}, owner=self.owner, partitions=self.partitions
        )
        return _Node(engine, {t: engine.position(t) for t in self.logs})

    def _deliver(self, p: int, topic: str) -> None:
        node = self.nodes[p]
        offset = node.received[topic]
        node.received[topic] = offset + 1
        source = (topic, p, offset)
        if topic == EVENTS:
            kind, batch_id, tuples = self.logs[topic][p][offset]
            if kind == PROGRESS:
                node.engine.progress(EVENTS, batch_id, source)
            else:
                node.engine.process(EVENTS, batch_id, [dict(t) for t in tuples], source)
        else:
            sender, batch_id, tuples = self.logs[topic][p][offset]
            node.engine.process_hop("tally", sender, batch_id, [dict(t) for t in tuples], source)

    def _commit(self, p: int) -> None:
        group = self.nodes[p].engine.take_group()
        self.bases[p].apply(group)
        for out in group.outputs:
            if out.hop is not None:
                self.logs[HOP][out.partition].append((p, out.batch_id, list(out.tuples)))
            elif out.stream == "item_totals":
                self.totals[p] += out.tuples

    def run(self, crash_rate: float = 0.0, max_crashes: int = 8, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if self._done():
                return
            p = self.rng.randrange(self.partitions)
            roll = self.rng.random()
            if roll < crash_rate and self.crashes < max_crashes:
                self.crashes += 1
                self.nodes[p] = self._start(p)
                continue
            node = self.nodes[p]
            choices = [t for t in self.logs if node.received[t] < len(self.logs[t][p])]
            if not choices or roll < 0.2:
                if not node.engine.group.empty:
                    self._commit(p)
                continue
            self._deliver(p, self.rng.choice(choices))
        raise AssertionError(f"no progress after {max_steps} steps")

    def _done(self) -> bool:
        return all(
            node.engine.group.empty
            and all(node.engine.position(t) >= len(self.logs[t][p]) for t in self.logs)
            for p, node in enumerate(self.nodes)
        )

    def counts(self, table: str) -> dict[int, tuple[int, int]]:
        """A table's committed rows from every engine, as key -> (orders, units); each key
        must live on its owner alone."""
        out: dict[int, tuple[int, int]] = {}
        for p, base in enumerate(self.bases):
            for key, row in base.tables.get(table, {}).items():
                assert self.owner(key) == p, f"{table} {key} is on engine {p}"
                assert int(key[0]) not in out, f"{table} {key} on two engines"
                out[int(key[0])] = (row["orders"], row["units"])
        return out

    def hop_order(self) -> list[list[tuple[int, int]]]:
        """Per partition of tally's topic: (sender, batch id) of each part, in log order."""
        return [[(s, b) for s, b, tuples in log if tuples] for log in self.logs[HOP]]
