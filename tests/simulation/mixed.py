"""A seeded simulation of every transaction mechanism on the same constrained rows, across
partitions, with engines and the coordinator crashing, against a model of the clients' view.

Real code driven: one `PartitionEngine` per partition (its participant: single-partition
runs, 2PC prepares and decisions, promised (BASIC) and BASE transactions, queries), each
over a `LaggingState` (a store that loses what was not flushed and replays its changelog),
and the coordinator's state machine (`coordinator.Coordinator`: 2PC, SERIALIZE, reads,
recovery from its log, log truncation). The topics are lists in memory, read in order per
partition; which component moves next is drawn at random:
- a client submits: a promise to the promises topic of its row's partition (named there by
  its offset, `promise_id`, as the task names it), or a request to the coordinator;
- an engine reads one record of a topic it has not read to the end, as `PartitionTask`
  does: a record that must wait for a 2PC decision is deferred with every later request
  and promise, a decision runs at once and then drains the deferred (a query may go ahead
  of deferred promises, not of a deferred request);
- an engine commits its group: the state applied (positions included, as
  `engine.set_position` keeps them), its replies sent, atomically;
- the coordinator reads a request or a reply; it flushes what it has read, with a tick,
  in one transaction (log records and the positions reached, requests, decisions,
  results, statuses), then may truncate its log as the runtime does;
- time passes; an engine asks again for the decisions it waits for (`reinquire`);
- an engine crashes (its group and deferred records lost, its store back to the last
  flush, then restore, a new engine, `load`, and reading on from its committed positions);
- the coordinator crashes (what it read since its last flush lost; a new machine
  recovers from the log and reads on from the positions logged last).
Then, with no more crashes, everything runs until nothing is left to do.

The model knows nothing of the engine: it takes the final status the clients got for each
transaction they submitted, and from the committed ones computes every row (quantities,
audit counts, the prices it may hold) and the item sums the constraint bounds. Every
transaction gets exactly one final status (a promise's also on the statuses topic), but
a query the coordinator took before it restarted, which it keeps in memory only, may get
none: the client's own timeout answers it, and a read changes nothing.
"""

from __future__ import annotations

import json
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, partial
from typing import TypedDict

from tests.simulation.store import LaggingState
from txstream import App, Record, TxnContext
from txstream.engine.group import CommitGroup
from txstream.engine.participant import PREPARED_TABLE
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import PROMISED_TABLE, promise_id
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.oltp.messages import (
    CoordinatorLog,
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    Query,
    TxnRequest,
    TxnResult,
)
from txstream_coordinator.actions import Actions
from txstream_coordinator.coordinator import Coordinator

APP = "mixed"
TABLE = "stock"
NONNEGATIVE = "sum(qty) >= 0 group by item"
TOPICS = AppTopics(APP)
OUT = TOPICS.oltp_out
Row = tuple[int, int]  # (item, site)


class Units(TypedDict):
    item: int
    site: int
    n: int


class PricedUnits(TypedDict):
    item: int
    site: int
    n: int
    price: int


class Price(TypedDict):
    item: int
    site: int
    price: int


class Site(TypedDict):
    item: int
    site: int


# Built once: every run shares it, since nothing changes its declarations.
@cache
def build_app() -> App:
    """Stock of items at sites: an item's sites on several partitions, its sum bounded."""
    app = App(APP)
    app.table(TABLE, schema="sim.Stock", key=("item", "site"), aggregates=[NONNEGATIVE])

    def key(params: Record) -> Row:
        return (params["item"], params["site"])

    def existing(ctx: TxnContext, params: Record) -> Record:
        """The row; the transaction aborts `no_row` if there is none."""
        row = ctx.table(TABLE).get(key(params))
        if row is None:
            ctx.abort("no_row", f"no row {key(params)}")
        assert row is not None
        return row

    @app.transaction(params=Units)
    def restock(ctx: TxnContext, params: Record) -> int:
        """Promised: units arrive (an add)."""
        return int(ctx.table(TABLE).add(key(params), {"qty": params["n"]})["qty"])

    @app.transaction(params=Units)
    def reserve(ctx: TxnContext, params: Record) -> int:
        """Promised: units taken (an add)."""
        return int(ctx.table(TABLE).add(key(params), {"qty": -params["n"]})["qty"])

    @app.transaction(params=PricedUnits)
    def reserve_at(ctx: TxnContext, params: Record) -> int:
        """Promised: units taken (an add), then the row written whole at a price (a put)."""
        stock = ctx.table(TABLE)
        row = stock.add(key(params), {"qty": -params["n"]})
        stock.put(key(params), {**row, "price": params["price"]})
        return int(row["qty"])

    @app.transaction(params=Price)
    def set_price(ctx: TxnContext, params: Record) -> int:
        """ACID: the row read and written whole at a new price."""
        row = existing(ctx, params)
        ctx.table(TABLE).put(key(params), {**row, "price": params["price"]})
        return int(params["price"])

    @app.transaction(params=Site)
    def audit_add(ctx: TxnContext, params: Record) -> int:
        """ACID (a fragment of `audit_pair`): one audit more, by an add."""
        return int(ctx.table(TABLE).add(key(params), {"audits": 1})["audits"])

    @app.transaction(params=Site)
    def audit(ctx: TxnContext, params: Record) -> int:
        """BASE: one audit more, read and written whole."""
        row = existing(ctx, params)
        ctx.table(TABLE).put(key(params), {**row, "audits": row["audits"] + 1})
        return int(row["audits"]) + 1

    return app


# The kinds of transaction clients submit, how often, and how each is sent: a promise
# ("promise", "base") goes to its partition's promises topic, the rest to the coordinator.
KINDS = {
    "restock": 5,
    "reserve": 5,
    "reserve_at": 3,
    "set_price": 2,
    "set_price_2pc": 2,
    "audit_pair": 2,
    "audit": 2,
    "query": 1,
}
PROMISED = {"restock": "promise", "reserve": "promise", "reserve_at": "promise", "audit": "base"}


@dataclass
class Txn:
    """A transaction as its client sees it: what it asked, and what came back."""

    request_id: str
    kind: str
    rows: tuple[Row, ...]
    n: int = 0
    price: int = 0
    # coordinator restarts before it was submitted: a query, which the coordinator keeps in
    # memory alone, gets no result if one comes later (the client's own timeout answers)
    restarts: int = 0
    results: list[TxnResult] = field(default_factory=list)  # on the client reply topic
    statuses: list[TxnResult] = field(default_factory=list)  # on the statuses topic

    @property
    def promised(self) -> bool:
        return self.kind in PROMISED

    def answered(self, restarts: int) -> bool:
        """Whether it has its final status, or as a query may go without one."""
        if self.results:
            return bool(self.statuses) or not self.promised
        return self.kind == "query" and restarts > self.restarts

    @property
    def final(self) -> TxnResult | None:
        return self.results[0] if self.results else None

    @property
    def committed(self) -> bool:
        final = self.final
        return final is not None and final.status == "committed"

    def text(self) -> str:
        what = f"{self.request_id} {self.kind} {list(self.rows)}"
        if self.n:
            what += f" n={self.n}"
        if self.price:
            what += f" price={self.price}"
        final = self.final
        if final is None:
            return f"{what}: no status"
        return f"{what}: {final.txn_id} {final.status} {final.reason}".rstrip()


@dataclass
class Expected:
    qty: int = 0
    audits: int = 0
    prices: set[int] = field(default_factory=lambda: {0})


def model(txns: list[Txn], rows: list[Row]) -> dict[Row, Expected]:
    """Each row as the committed transactions leave it, from the clients' view alone: the
    quantity its restocks and reservations add up to, its audits, the prices it may hold."""
    out = {row: Expected() for row in rows}
    for t in txns:
        if not t.committed:
            continue
        for row in t.rows:
            want = out[row]
            if t.kind == "restock":
                want.qty += t.n
            elif t.kind in ("reserve", "reserve_at"):
                want.qty -= t.n
            if t.kind in ("reserve_at", "set_price", "set_price_2pc"):
                want.prices.add(t.price)
            if t.kind in ("audit", "audit_pair"):
                want.audits += 1
    return out


class Node:
    """One partition's engine, its store, and what it has read of its topics."""

    def __init__(self, sim: Simulation, partition: int) -> None:
        self.sim = sim
        self.p = partition
        self.base = LaggingState(sim.rng, sim.flush)
        self.engine: PartitionEngine
        self.received: dict[str, int] = {}  # topic -> next offset to read
        self.deferred: deque[tuple[str, int]] = deque()
        self.deferred_requests = 0  # of the deferred, the coordinator's requests
        self.restarts = 0

    def seed_rows(self, rows: list[Row]) -> None:
        """The initial rows, committed as any group is (so a crash replays them too)."""
        group = CommitGroup()
        for item, site in rows:
            group.ws.put(TABLE, (item, site), initial_row(item, site))
        self.base.apply(group)

    def start(self) -> None:
        """As `PartitionTask.open`: the engine built, the store restored, state loaded."""
        self.engine = PartitionEngine(
            self.sim.dataflow, self.base, self.p, {}, partitions=self.sim.partitions
        )
        behind = self.base.restore()
        prepared = self.engine.load()
        if self.restarts:  # what the restart found: the crash paths this run took
            promised = self.engine.participant.promises
            seen = self.sim.seen
            seen["store behind"] += behind > 0
            seen["prepared reloaded"] += bool(prepared)
            seen["promise reloaded"] += bool(promised.held)
            seen["landing reloaded"] += bool(promised.landing)
        self.received = {t: self.engine.position(t) for t in self.sim.engine_topics}
        self.deferred.clear()
        self.deferred_requests = 0

    def crash(self) -> None:
        """The process died: the group and the deferred records are gone, the store is back
        to its last flush; then it starts again."""
        self.base.crash()
        self.restarts += 1
        self.start()

    def record(self, topic: str, offset: int) -> EngineRequest | Decision:
        if topic == TOPICS.decisions:
            return self.sim.decisions[self.p][offset]
        if topic == TOPICS.promises:
            return self.sim.promises[self.p][offset]
        return self.sim.requests[self.p][offset]

    def unread(self) -> list[str]:
        sim, p = self.sim, self.p
        ends = {TOPICS.requests: len(sim.requests[p]), TOPICS.decisions: len(sim.decisions[p]),
                TOPICS.promises: len(sim.promises[p])}  # fmt: skip
        return [t for t in sim.engine_topics if self.received[t] < ends[t]]

    def read(self, topic: str) -> None:
        """The next record of `topic`, handled as `PartitionTask._handle` does."""
        offset = self.received[topic]
        self.received[topic] = offset + 1
        if topic == TOPICS.decisions:
            self.process(topic, offset)
            self.drain()
        elif self.deferred and topic == TOPICS.requests and self.read_ahead(offset):
            self.sim.seen["query ahead"] += 1
        elif self.deferred or not self.process(topic, offset):
            self.deferred.append((topic, offset))
            self.deferred_requests += topic == TOPICS.requests
            self.sim.seen["deferred"] += 1

    def read_ahead(self, offset: int) -> bool:
        """A query may run ahead of deferred promises, not of a deferred request."""
        req = self.sim.requests[self.p][offset]
        if self.deferred_requests or req.kind != "read":
            return False
        return self.process(TOPICS.requests, offset)

    def drain(self) -> None:
        while self.deferred and self.process(*self.deferred[0]):
            if self.deferred.popleft()[0] == TOPICS.requests:
                self.deferred_requests -= 1

    def process(self, topic: str, offset: int) -> bool:
        """One record; False if it must wait for a decision (nothing applied)."""
        record = self.record(topic, offset)
        if isinstance(record, Decision):
            self.engine.decide(record)
        else:
            if topic == TOPICS.promises:  # named by its place, whatever its client named it
                record = replace(record, txn_id=promise_id(self.p, offset))
            if not self.engine.request(record):
                return False
        self.engine.journal_oltp(topic, offset)
        self.engine.set_position(topic, offset + 1)
        return True

    def commit(self) -> None:
        """The group's state and replies, atomically (one Kafka transaction)."""
        if self.engine.group.empty:
            return
        group = self.engine.take_group()
        self.base.apply(group)
        self.sim.replies.extend(group.replies)

    def reinquire(self) -> None:
        self.engine.reinquire(0.0)

    @property
    def idle(self) -> bool:
        p = self.engine.participant
        return (
            not self.unread()
            and not self.deferred
            and self.engine.group.empty
            and not p.prepared
            and not p.promises.held
            and not p.promises.landing
        )


class CoordinatorNode:
    """The coordinator machine and the runtime around it: what it has read of its inputs,
    what it has read since its last flush, and its log with the positions in it."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.machine: Coordinator
        self.received: dict[str, int] = {}
        self.pending = Actions()
        self.unlogged = False  # input read since the last positions record
        self.positions_offset: int | None = None
        self.restarts = 0

    def start(self) -> None:
        """As `CoordinatorRuntime._take_over`: the log replayed, reading on from the newest
        positions in it, the recovery's actions flushed at once."""
        records: list[tuple[int, CoordinatorLog]] = []
        positions: dict[str, int] = {}
        for offset, record in self.sim.log:
            if record.kind == "positions":
                positions, self.positions_offset = json.loads(record.results), offset
            else:
                records.append((offset, record))
        decl = self.sim.app.decl
        self.machine = Coordinator(self.sim.partitions, TOPICS, decl.transactions, decl.tables,
                                   bounds=decl.aggregates)  # fmt: skip
        self.pending = self.machine.recover(records, self.sim.now)
        if self.restarts:
            self.sim.seen["coordinator in doubt"] += bool(self.machine.active)
        self.received = {t: positions.get(t, 0) for t in (TOPICS.oltp_in, TOPICS.replies)}
        self.unlogged = True
        self.flush(tick=False, force=True)

    def crash(self) -> None:
        """What it read since its last flush is lost with the machine."""
        self.restarts += 1
        self.start()

    def inputs(self) -> dict[str, list[TxnRequest] | list[EngineReply]]:
        return {TOPICS.oltp_in: self.sim.oltp_in, TOPICS.replies: self.sim.replies}

    def unread(self) -> list[str]:
        return [t for t, records in self.inputs().items() if self.received[t] < len(records)]

    def read(self, topic: str) -> None:
        offset = self.received[topic]
        self.received[topic] = offset + 1
        self.unlogged = True
        record = self.inputs()[topic][offset]
        if isinstance(record, TxnRequest):
            self.pending.extend(self.machine.request(record, self.sim.now))
        else:
            self.pending.extend(self.machine.reply(record, self.sim.now))

    def flush(self, tick: bool = True, force: bool = False) -> None:
        """One transaction: log records with the positions reached, requests, decisions,
        results and statuses; then the machine is told the offsets, and the log may be
        truncated, never past the newest positions."""
        acts, self.pending = self.pending, Actions()
        if tick:
            acts.extend(self.machine.tick(self.sim.now))
        if not acts and not self.unlogged and not force:
            return
        sim = self.sim
        offsets = []
        for record in acts.log:
            offsets.append(sim.append_log(record))
        if self.unlogged:
            reached = json.dumps(self.received, sort_keys=True)
            self.positions_offset = sim.append_log(
                CoordinatorLog("positions", self.machine.epoch, results=reached)
            )
            self.unlogged = False
        for part, req in acts.requests:
            sim.requests[part].append(req)
        for part, d in acts.decisions:
            sim.decisions[part].append(d)
        for reply_to, result in acts.results:
            assert reply_to == OUT, reply_to
            sim.deliver(result, status=False)
        for result in acts.statuses:
            sim.deliver(result, status=True)
        for record, offset in zip(acts.log, offsets, strict=True):
            self.machine.logged(record, offset)
        if sim.truncate and sim.rng.random() < 0.3:
            cut = self.machine.truncation_point()
            if cut is not None and self.positions_offset is not None:
                kept = [(o, r) for o, r in sim.log if o >= min(cut, self.positions_offset)]
                sim.seen["log truncated"] += len(kept) < len(sim.log)
                sim.log = kept

    @property
    def idle(self) -> bool:
        m = self.machine
        return not self.unread() and not self.pending and not m.active and not m.reads


def initial_row(item: int, site: int) -> Record:
    return {"item": item, "site": site, "qty": 0, "price": 0, "audits": 0}


class Simulation:
    """One seed's run: `run` then `check`."""

    def __init__(
        self, seed: int, transactions: int | None = None, kinds: Mapping[str, int] = KINDS
    ) -> None:
        self.seed = seed
        self.kinds = dict(kinds)
        rng = self.rng = random.Random(seed)
        self.partitions = rng.choice([2, 3])
        self.flush = rng.choice([0.0, 0.3, 0.9])
        self.crash_rate = rng.choice([0.0, 0.01, 0.03])
        self.truncate = rng.random() < 0.5
        self.transactions = transactions or rng.randint(20, 40)
        self.app = build_app()
        self.dataflow = self.app.dataflow()
        self.now = 0.0
        self.rows = self._rows(rng.randint(1, 2), rng.randint(2, 3))
        self.owner: dict[Row, int] = {r: partition_of(r, self.partitions) for r in self.rows}
        self.engine_topics = (TOPICS.requests, TOPICS.decisions, TOPICS.promises)
        # each engine topic's partitions: the coordinator's requests and decisions, and the
        # clients' promises
        self.requests: list[list[EngineRequest]] = [[] for _ in range(self.partitions)]
        self.decisions: list[list[Decision]] = [[] for _ in range(self.partitions)]
        self.promises: list[list[EngineRequest]] = [[] for _ in range(self.partitions)]
        self.oltp_in: list[TxnRequest] = []
        self.replies: list[EngineReply] = []
        self.log: list[tuple[int, CoordinatorLog]] = []
        self._next_log = 0
        self.txns: list[Txn] = []
        self.by_request: dict[str, Txn] = {}
        self.strays: list[TxnResult] = []  # results for no transaction a client submitted
        self.seen: Counter[str] = Counter()  # paths taken, for the test that they are
        self.nodes = [Node(self, p) for p in range(self.partitions)]
        for node in self.nodes:
            node.seed_rows([r for r in self.rows if self.owner[r] == node.p])
            node.start()
        self.coordinator = CoordinatorNode(self)
        self.coordinator.start()
        self.steps = 0

    def _rows(self, items: int, sites: int) -> list[Row]:
        """`sites` sites per item, more where that leaves an item on one partition (2PC
        transactions take two sites of one item on two partitions)."""
        rows = []
        for item in range(items):
            mine = [(item, s) for s in range(sites)]
            s = sites
            while len({partition_of(r, self.partitions) for r in mine}) < 2:
                mine.append((item, s))
                s += 1
            rows += mine
        return rows

    # -- the topics ------------------------------------------------------------------------

    def append_log(self, record: CoordinatorLog) -> int:
        offset = self._next_log
        self._next_log += 1
        self.log.append((offset, record))
        return offset

    def deliver(self, result: TxnResult, status: bool) -> None:
        self.seen[f"{result.status} {result.reason}".rstrip()] += not status
        txn = self.by_request.get(result.request_id)
        if txn is None:
            self.strays.append(result)
        elif status:
            txn.statuses.append(result)
        else:
            txn.results.append(result)

    # -- clients ---------------------------------------------------------------------------

    def submit(self) -> None:
        rng = self.rng
        kind = rng.choices(list(self.kinds), weights=list(self.kinds.values()))[0]
        rid = f"c{len(self.txns)}"
        row = rng.choice(self.rows)
        if kind in ("set_price_2pc", "audit_pair"):
            a = rng.choice(self.rows)
            others = [r for r in self.rows if r[0] == a[0] and self.owner[r] != self.owner[a]]
            txn = Txn(rid, kind, (a, rng.choice(others)))
        else:
            txn = Txn(rid, kind, (row,))
        if kind in ("restock", "reserve", "reserve_at"):
            txn.n = rng.randint(1, 5)
        if kind in ("reserve_at", "set_price", "set_price_2pc"):
            txn.price = rng.randint(1, 99)
        txn.restarts = self.coordinator.restarts
        self.txns.append(txn)
        self.by_request[rid] = txn
        frags = [self._fragment(txn, r) for r in txn.rows]
        if kind in PROMISED:
            p = self.owner[row]
            # the client's own name: the engine names it by its offset (`promise_id`)
            req = EngineRequest(f"client-{rid}", 0, PROMISED[kind], rid, OUT, frags)
            self.promises[p].append(req)
        elif kind == "query":
            isolation = rng.choice(["read_committed", "snapshot"])
            key = json.dumps(list(row)) if rng.random() < 0.7 else None
            query = Query(TABLE, isolation, key)
            self.oltp_in.append(TxnRequest(rid, OUT, self._timeout(), query=query))
        else:
            self.oltp_in.append(TxnRequest(rid, OUT, self._timeout(), frags))

    def _timeout(self) -> int:
        return self.rng.choice([3_000, 10_000, 60_000])

    @staticmethod
    def _fragment(txn: Txn, row: Row) -> Fragment:
        item, site = row
        if txn.kind in ("restock", "reserve"):
            return Fragment.call(row, txn.kind, item=item, site=site, n=txn.n)
        if txn.kind == "reserve_at":
            return Fragment.call(row, txn.kind, item=item, site=site, n=txn.n, price=txn.price)
        if txn.kind in ("set_price", "set_price_2pc"):
            return Fragment.call(row, "set_price", item=item, site=site, price=txn.price)
        if txn.kind == "audit_pair":
            return Fragment.call(row, "audit_add", item=item, site=site)
        return Fragment.call(row, txn.kind, item=item, site=site)

    # -- the run ---------------------------------------------------------------------------

    def step(self, crashes: bool) -> None:
        """One move, drawn at random among those that can be made."""
        rng = self.rng
        moves: list[tuple[float, Callable[[], None]]] = []
        if len(self.txns) < self.transactions:
            moves.append((3.0, self.submit))
        for node in self.nodes:
            unread = node.unread()
            if unread:
                moves.append((3.0, partial(node.read, rng.choice(unread))))
            if not node.engine.group.empty:
                moves.append((1.0, node.commit))
            if node.engine.participant.prepared:
                moves.append((0.1, node.reinquire))
            if crashes:
                moves.append((self.crash_rate, node.crash))
        c = self.coordinator
        unread = c.unread()
        if unread:
            moves.append((3.0, partial(c.read, rng.choice(unread))))
        moves.append((1.0, c.flush))
        moves.append((0.5, self.pass_time))
        if crashes:
            moves.append((self.crash_rate, c.crash))
        weights = [w for w, _ in moves]
        _, move = rng.choices(moves, weights=weights)[0]
        move()
        self.steps += 1

    def pass_time(self) -> None:
        self.now += self.rng.choice([0.1, 0.5, 2.0])

    def run(self) -> None:
        while len(self.txns) < self.transactions:
            self.step(crashes=True)
        for _ in range(self.rng.randint(0, 4 * self.transactions)):
            self.step(crashes=True)
        self.settle()

    def settle(self, limit: int = 1_000) -> None:
        """No more crashes: every engine reads all it has and commits, the coordinator reads
        all it has and flushes, time passing whenever that moved nothing, until nothing is
        left to read, decide, land or answer."""
        rng = self.rng
        for _ in range(limit):
            if self.quiet:
                return
            moved = False
            for node in self.nodes:
                while unread := node.unread():
                    node.read(rng.choice(unread))
                    moved = True
                if not node.engine.group.empty:
                    node.commit()
                    moved = True
            c = self.coordinator
            while unread := c.unread():
                c.read(rng.choice(unread))
                moved = True
            c.flush()
            if not moved:  # only time moves things on now: timeouts, resent decisions
                self.now += 2.5
                for node in self.nodes:
                    node.reinquire()
        raise AssertionError(f"nothing left to do, yet not quiet: {self.waiting()}")

    @property
    def quiet(self) -> bool:
        answered = all(t.answered(self.coordinator.restarts) for t in self.txns)
        return (
            answered
            and all(n.idle for n in self.nodes)
            and self.coordinator.idle
            and len(self.txns) == self.transactions
        )

    def waiting(self) -> str:
        out = []
        for n in self.nodes:
            p = n.engine.participant
            out.append(
                f"engine {n.p}: unread {n.unread()}, deferred {list(n.deferred)}, prepared "
                f"{sorted(p.prepared)}, held {sorted(p.promises.held)}, landing "
                f"{sorted(p.promises.landing)}"
            )
        c = self.coordinator
        out.append(f"coordinator: unread {c.unread()}, active {sorted(c.machine.active)}")
        out += [t.text() for t in self.txns if not t.results]
        return "; ".join(out)

    # -- the check -------------------------------------------------------------------------

    def stored(self) -> dict[Row, list[Record]]:
        """Each row as the engines' committed states hold it (a row on two engines twice)."""
        out: dict[Row, list[Record]] = {}
        for node in self.nodes:
            for key, row in node.base.tables.get(TABLE, {}).items():
                out.setdefault((int(key[0]), int(key[1])), []).append(row)
        return out

    def check(self) -> str | None:
        """The first way the run differs from the model, or None."""
        for t in self.txns:
            due = 2 if t.promised else 1  # a promise's status goes to the statuses topic too
            count = len(t.results) + len(t.statuses)
            if count == 0 and t.answered(self.coordinator.restarts):
                continue
            if count != due or (t.promised and t.results[0] != t.statuses[0]):
                return f"{t.request_id} ({t.kind}) got {count} final statuses, not {due}: " + (
                    ", ".join(f"{r.txn_id} {r.status}" for r in t.results + t.statuses)
                )
        if self.strays:
            return f"results for no client's transaction: {self.strays}"
        for node in self.nodes:
            for table in (PREPARED_TABLE, PROMISED_TABLE):
                if node.base.tables.get(table):
                    return f"engine {node.p} still holds {table}: {node.base.tables[table]}"
        stored = self.stored()
        expected = model(self.txns, self.rows)
        sums: dict[int, int] = {}
        for row in self.rows:
            copies = stored.get(row, [])
            if len(copies) != 1:
                return f"row {row} is stored {len(copies)} times"
            have, want = copies[0], expected[row]
            sums[row[0]] = sums.get(row[0], 0) + int(have["qty"])
            wrong = []
            if have["qty"] != want.qty:
                wrong.append(f"qty {have['qty']}, the model says {want.qty}")
            if have["audits"] != want.audits:
                wrong.append(f"audits {have['audits']}, the model says {want.audits}")
            if have["price"] not in want.prices:
                wrong.append(f"price {have['price']}, the model says one of {sorted(want.prices)}")
            if wrong:
                return f"row {row}: " + "; ".join(wrong) + "\n" + self.history(row)
        for item, total in sorted(sums.items()):
            if total < 0:
                return f"item {item}: sum(qty) = {total} < 0"
        return None

    def history(self, row: Row) -> str:
        """The transactions submitted on `row`, in submission order, as their clients saw
        them end."""
        lines = [f"  {t.text()}" for t in self.txns if row in t.rows]
        return "transactions on it:\n" + "\n".join(lines)

    def describe(self) -> str:
        restarts = [n.restarts for n in self.nodes]
        return (
            f"{self.partitions} partitions, {len(self.rows)} rows, {self.transactions} "
            f"transactions, {self.steps} steps, flush chance {self.flush}, engine restarts "
            f"{restarts}, coordinator restarts {self.coordinator.restarts}, log truncated: "
            f"{self.truncate}"
        )


def run_seed(seed: int, kinds: Mapping[str, int] = KINDS) -> str | None:
    """The first difference from the model in seed `seed`'s run, described, or None."""
    sim = Simulation(seed, kinds=kinds)
    try:
        sim.run()
    except AssertionError as e:
        return f"seed {seed} ({sim.describe()}): {e}"
    problem = sim.check()
    if problem is None:
        return None
    return f"seed {seed} ({sim.describe()}): {problem}"
