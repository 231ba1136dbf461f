"""A seeded simulation of spanning procedures across P partition engines.

An app runs on P real `PartitionEngine`s over in-memory committed state. Logs stand in for
Kafka topics, one list of (stream, batch id, tuples) per partition: a spanning stream has
each batch on the partitions owning a key it declares, and progress marks on the others
(`routed`; or every batch on every partition, `broadcast`), others are placed by the
routing function. A log is produced record by record at random steps, so an engine may
catch up with its end; topics are taken in phases (the order pipeline loads its catalogue
before any event), and each engine's exchange partition receives the other engines' reads when
their task sends them, outside any transaction, some steps later, but before the group that
holds the batch commits. The seed picks which engine acts next, whether it takes a record, sends or
commits, and when an engine crashes (its uncommitted group and unsent reads are lost, and a
new engine starts from its committed state and positions, as a restarted worker does).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orders.dataflow import build_app
from orders.files import Shop
from orders.loader import event_batches
from orders.result import Result
from orders.results import from_outcomes
from txstream.engine.epochs import EPOCH_TABLE
from txstream.engine.group import SYS_TABLE, CommitGroup, OutputBatch
from txstream.engine.hops import PROGRESS
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.routing import partition_of
from txstream.model.app import App
from txstream.model.declarations import Record
from txstream.testing import MemoryState

EXCHANGE = "exchange"
SYSTEM = frozenset({SYS_TABLE, EPOCH_TABLE})  # the engine's own tables, not the app's
Log = list[list[Any]]  # per partition: (stream, batch id, tuples), or Reads on the exchange


@dataclass
class _Node:
    """One engine and what its (simulated) task holds in memory."""

    engine: PartitionEngine
    received: dict[str, int] = field(default_factory=dict)


class SpanCluster:
    def __init__(self, app: App, partitions: int, phases: list[dict[str, Log]], seed: int) -> None:
        """`phases`: topic logs, each phase taken only once every earlier one is committed
        on every partition."""
        self.rng = random.Random(seed)
        self.partitions = partitions
        self.app, self.df = app, app.dataflow()
        self._settled = 0  # phases committed on every partition (they stay so)
        self.crashes = 0
        self.phases = [list(phase) for phase in phases]
        self.logs: dict[str, Log] = {t: log for phase in phases for t, log in phase.items()}
        self.logs[EXCHANGE] = [[] for _ in range(partitions)]
        # topic -> per partition, how much of its log is produced so far
        self.produced = {t: [0] * partitions for phase in phases for t in phase}
        self.bases = [MemoryState() for _ in range(partitions)]
        self.nodes = [self._start(p) for p in range(partitions)]
        self.outputs: list[OutputBatch] = []
        # per engine, how many spanning batches it ran, as committed
        self.ran = [0] * partitions
        # per engine, (topic, batch id) of every batch (not mark) delivered to it
        self.delivered: list[list[tuple[str, int]]] = [[] for _ in range(partitions)]

    def owner(self, key: Any) -> int:
        return partition_of(key, self.partitions)

    def _start(self, p: int) -> _Node:
        """An engine from `p`'s committed state; like a task, it catches up on the spanning
        topics to their ends (those open: a later phase's topic is not produced yet)."""
        engine = PartitionEngine(self.df, self.bases[p], p, {}, owner=self.owner)
        for topic in engine.spanning & set(self._open_topics()):
            engine.spans.catch_up(topic, self._end(topic, p))
        return _Node(engine, {t: engine.position(t) for t in self.logs})

    def _committed(self, p: int, topics: list[str]) -> bool:
        engine = PartitionEngine(self.df, self.bases[p], p, {}, owner=self.owner)
        return all(engine.position(t) >= len(self.logs[t][p]) for t in topics)

    def _end(self, topic: str, p: int) -> int:
        """The end of `topic`'s log on partition `p` as produced so far."""
        produced = self.produced.get(topic)
        return len(self.logs[topic][p]) if produced is None else produced[p]

    def _produce(self) -> bool:
        """One more record of an open topic's log on one partition, if any is left."""
        left = [
            (t, q)
            for t in self._open_topics()
            for q in range(self.partitions)
            if self.produced[t][q] < len(self.logs[t][q])
        ]
        if not left:
            return False
        t, q = self.rng.choice(left)
        self.produced[t][q] += 1
        return True

    def _open_topics(self) -> list[str]:
        """The topics of every phase whose predecessors are all committed everywhere."""
        open_: list[str] = []
        for i, phase in enumerate(self.phases):
            open_ += phase
            if i < self._settled:
                continue
            if not all(self._committed(p, phase) for p in range(self.partitions)):
                break
            self._settled = i + 1
        return open_

    def _choices(self, p: int) -> list[str]:
        node, engine = self.nodes[p], self.nodes[p].engine
        out = []
        if node.received[EXCHANGE] < len(self.logs[EXCHANGE][p]):
            out.append(EXCHANGE)
        for t in self._open_topics():  # topics are named for their streams here
            held = engine.spans.holds(spanning=t in engine.spanning)
            if not held and node.received[t] < self._end(t, p):
                out.append(t)
        return out

    def _deliver(self, p: int, topic: str) -> None:
        node = self.nodes[p]
        offset = node.received[topic]
        node.received[topic] = offset + 1
        record = self.logs[topic][p][offset]
        if topic == EXCHANGE:
            node.engine.spans.receive(record, (topic, p, offset))
        else:
            stream, batch_id, tuples = record
            if stream == PROGRESS:
                node.engine.progress(topic, batch_id, (topic, p, offset))
                return
            self.delivered[p].append((topic, batch_id))
            node.engine.process(stream, batch_id, [dict(t) for t in tuples], (topic, p, offset))

    def _commit(self, p: int) -> None:
        self._send(p)  # the task has every read delivered before a group commits
        group: CommitGroup = self.nodes[p].engine.take_group()
        self.bases[p].apply(group)
        self.outputs += group.outputs
        self.ran[p] += len(group.spans)

    def _send(self, p: int) -> None:
        """The task sends an engine's reads at once, outside its group's transaction."""
        outbox = self.nodes[p].engine.spans.outbox
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
            if self.rng.random() < 0.25 and self._produce():
                continue
            p = self.rng.randrange(self.partitions)
            roll = self.rng.random()
            if roll < crash_rate and self.crashes < max_crashes:
                self._crash(p)
                continue
            if self.nodes[p].engine.spans.outbox and roll < 0.5:
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
        topics = [t for phase in self.phases for t in phase]
        for p, node in enumerate(self.nodes):
            engine = node.engine
            if not engine.group.empty or engine.spans.queue or engine.spans.outbox:
                return False
            if not self._committed(p, topics):
                return False
        return True

    def _where(self) -> str:
        return ", ".join(
            f"p{p}: at {dict(n.received)}, queued "
            f"{[(e.batch_id, e.state.value) for e in n.engine.spans.queue]}"
            for p, n in enumerate(self.nodes)
        )

    def tables(self) -> dict[str, dict[Any, Record]]:
        """Every engine's committed rows, merged (each key lives on one engine)."""
        tables: dict[str, dict[Any, Record]] = {}
        for base in self.bases:
            for table, rows in base.tables.items():
                if table not in SYSTEM:
                    tables.setdefault(table, {}).update(rows)
        return tables

    def misplaced(self) -> list[tuple[int, str, Any]]:
        """(engine, table, key) of every committed row on an engine that does not own it."""
        return [
            (p, table, key)
            for p, base in enumerate(self.bases)
            for table, rows in base.tables.items()
            if table not in SYSTEM
            for key in rows
            if self.owner(key) != p
        ]

    def exchanged(self) -> int:
        return sum(len(log) for log in self.logs[EXCHANGE])


def random_transfers(
    rng: random.Random, accounts: int, count: int, unknown_payers: bool = False
) -> list[Record]:
    """TSpoon's transfers between random accounts (with `unknown_payers`, one past the last
    account may pay: a transfer from no account)."""
    payers = accounts + 1 if unknown_payers else accounts
    return [
        {
            "seq": i,
            "payer": rng.randrange(payers),
            "payee": rng.randrange(accounts),
            "amount": rng.randint(1, 60),
        }
        for i in range(count)
    ]


def openings(opening: dict[int, int], partitions: int) -> Log:
    """The `opens` log: each account's opening balance on the partition owning it."""
    opens: Log = [[] for _ in range(partitions)]
    for a, balance in opening.items():
        p = partition_of((a,), partitions)
        opens[p].append(("opens", len(opens[p]) + 1, [{"account": a, "balance": balance}]))
    return opens


def broadcast(stream: str, batches: list[list[Record]], partitions: int) -> Log:
    """A spanning stream's log: batch b (from 1) on every partition."""
    return [[(stream, b, tuples) for b, tuples in enumerate(batches, 1)] for _ in range(partitions)]


def touched(app: App, stream: str, tuples: list[Record], partitions: int) -> set[int]:
    """The partitions owning a key some tuple of a batch of spanning `stream` declares
    (partition 0 for a batch declaring none), computed here from the declaration and the
    routing function, not by the engine's code."""
    df = app.dataflow()
    (touches,) = [df.touches(p.name) for p in app.decl.procedures.values() if p.input == stream]
    assert touches is not None, f"{stream!r} is no spanning procedure's input"
    places = set()
    for t in tuples:
        for _, key in touches(t):
            places.add(partition_of(key if isinstance(key, tuple) else (key,), partitions))
    return places or {0}


def routed(
    app: App, stream: str, batches: list[list[Record]], partitions: int, mark_every: int = 1
) -> Log:
    """A spanning stream's log as a routing producer writes it: batch b (from 1) only on the
    partitions it touches (`touched`); after every `mark_every` batches, and after the last,
    a progress mark of the last id on each partition whose log ends below it."""
    logs: Log = [[] for _ in range(partitions)]
    for b, tuples in enumerate(batches, 1):
        for p in sorted(touched(app, stream, tuples, partitions)):
            logs[p].append((stream, b, tuples))
        if b % mark_every == 0 or b == len(batches):
            for log in logs:
                if not log or log[-1][1] < b:
                    log.append((PROGRESS, b, []))
    return logs


def routed_together(
    app: App, batches: list[tuple[str, list[Record]]], partitions: int, rng: random.Random
) -> dict[str, Log]:
    """Several spanning streams' logs as one producer writes them: batch b (from 1, one id
    sequence) of its stream on the partitions it touches (`touched`), in transactions of
    random length, each ending with a progress mark of its last id, on every spanning
    stream, to each partition whose log of that stream ends below it."""
    streams = sorted(app.dataflow().spanning_streams)
    logs: dict[str, Log] = {s: [[] for _ in range(partitions)] for s in streams}
    b = 0
    while b < len(batches):
        end = min(len(batches), b + rng.randint(1, 6))
        for i in range(b, end):
            stream, tuples = batches[i]
            for p in sorted(touched(app, stream, tuples, partitions)):
                logs[stream][p].append((stream, i + 1, tuples))
        b = end
        for log in (log for s in streams for log in logs[s]):
            if not log or log[-1][1] < b:
                log.append((PROGRESS, b, []))
    return logs


class OrdersSim(SpanCluster):
    """The order pipeline: the catalogue and accounts first, then the events, routed to
    the partitions each batch touches with a mark every `mark_every` batches, or with
    `mark_every=None` broadcast."""

    def __init__(
        self, shop: Shop, partitions: int, batch_size: int, seed: int, mark_every: int | None = 1
    ) -> None:
        self.events = len(shop.events)
        owner = self.owner_for(partitions)
        loads: dict[str, Log] = {
            t: [[] for _ in range(partitions)] for t in ("items_in", "accounts_in")
        }
        for i, item in enumerate(shop.items.values(), 1):
            row = {"item": item.item, "price": item.price, "stock": item.stock, "sold": 0}
            loads["items_in"][owner((item.item,))].append(("items_in", i, [row]))
        for i, c in enumerate(shop.customers.values(), 1):
            row = {"customer": c.customer, "balance": c.balance}
            loads["accounts_in"][owner((c.customer,))].append(("accounts_in", i, [row]))
        app, batches = build_app(), event_batches(shop, batch_size)
        if mark_every is None:
            events = broadcast("events", batches, partitions)
        else:
            events = routed(app, "events", batches, partitions, mark_every)
        super().__init__(app, partitions, [loads, {"events": events}], seed)

    @staticmethod
    def owner_for(partitions: int) -> Callable[[Any], int]:
        return lambda key: partition_of(key, partitions)

    def result(self) -> Result:
        """The result document from the committed outcomes and every engine's state."""
        outcomes = [t for out in self.outputs for t in out.tuples]
        return from_outcomes(outcomes, self.tables(), self.events)
