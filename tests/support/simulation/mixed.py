"""A seeded simulation of every transaction mechanism on the same constrained rows, across
partitions, with engines and the coordinator crashing, against a model of the clients' view.

Real code driven: one `PartitionEngine` per partition (its participant: single-partition
runs, 2PC prepares and decisions, promised (BASIC) and BASE transactions, queries; its span
runner: a spanning procedure at one of PL0-PL4, drawn per seed), each over a
`LaggingState` (a store that loses what was not flushed and replays its changelog), and
the coordinator's state machine (`coordinator.Coordinator`: 2PC, SERIALIZE, reads,
recovery from its log, log truncation). The topics are lists in memory, read in order per
partition; which component moves next is drawn at random:
- a client submits: a promise to the promises topic of its row's partition (named there by
  its offset, `promise_id`, as the task names it), a request to the coordinator, or a
  batch of the spanning stream (transfers between accounts, and stock counts that read
  and write the same stock rows as the transactions) to every partition at once;
- an engine reads one record of a topic it has not read to the end, as `InputRouter`
  does: a record that must wait (for a 2PC decision, for queued spanning batches, or a
  spanning batch for per-partition work to commit) is deferred with every later one but
  the exchange's reads and the decisions, which run at once and then drain the deferred
  (a query may go ahead of deferred records, not of a deferred request); after a start,
  requests and promises are not read until the spanning topic is read to its end then;
- an engine sends its reads for spanning batches (at once, outside its transaction);
- an engine commits its group: its reads sent first, then the state applied (positions
  included, as `engine.set_position` keeps them), its replies and outputs sent,
  atomically;
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
transaction they submitted and the outcome emitted for each spanning tuple, and from the
committed ones computes every stock row (quantities, audit counts, the prices it may hold)
and the item sums the constraint bounds; the transfers, on accounts no transaction
touches, must equal `bank.transfer_reference` at the procedure's level, which shares no
code with the engine. Every
transaction gets exactly one final status (a promise's also on the statuses topic), but
a query the coordinator took before it restarted, which it keeps in memory only, may get
none: the client's own timeout answers it, and a read changes nothing.
"""

from __future__ import annotations

import json
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, partial
from typing import Any, TypedDict

from bank.transfer_reference import reference as transfer_reference
from tests.support.simulation.store import LaggingState
from txstream import App, Isolation, Record, TxnContext
from txstream.engine.group import CommitGroup
from txstream.engine.participant import PREPARED_TABLE
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import PROMISED_TABLE, promise_id
from txstream.engine.spanning import Reads
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
ACCOUNTS = "accounts"
MOVES = "moves"  # the spanning stream, which is also its topic here
EXCHANGE = "exchange"  # the engines' reads for spanning batches
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


@dataclass(frozen=True)
class Spanning:
    """How the app's spanning procedure runs: its isolation level, epoch length, and
    whether transfers move money by formula (`add`) or by writing balances (`put`)."""

    isolation: Isolation = Isolation.PL4
    epoch: int = 8
    formulas: bool = False

    def __str__(self) -> str:
        by = "formulas" if self.formulas else "puts"
        return f"{self.isolation.value}, epoch {self.epoch}, {by}"


# Built once per level: every run at it shares it, since nothing changes its declarations.
@cache
def build_app(spanning: Spanning = Spanning()) -> App:
    """Stock of items at sites: an item's sites on several partitions, its sum bounded;
    and accounts. A spanning stream counts stock at two sites of an item and moves money
    between accounts, at `spanning`'s level."""
    app = App(APP)
    app.table(TABLE, schema="sim.Stock", key=("item", "site"), aggregates=[NONNEGATIVE])
    app.table(ACCOUNTS, schema="sim.Account", key=("account",))
    moves = app.stream(MOVES, schema="sim.Move")
    outcomes = app.stream("outcomes", schema="sim.Outcome")

    def touches(t: Record) -> list[tuple[str, Any]]:
        if t["kind"] == "transfer":
            return [(ACCOUNTS, t["payer"]), (ACCOUNTS, t["payee"])]
        return [(TABLE, (t["item"], t["a"])), (TABLE, (t["item"], t["b"]))]

    def transfer(ctx: TxnContext, t: Record) -> str:
        """Money between accounts, as `bank.stream_transfers` moves it."""
        accounts = ctx.table(ACCOUNTS)
        payer, payee, amount = accounts.get(t["payer"]), accounts.get(t["payee"]), t["amount"]
        if payer is None or payee is None:
            return "no_account"
        if t["payer"] == t["payee"]:
            return "same_account"
        if payer["balance"] < amount:
            return "insufficient_funds"
        if spanning.formulas:
            accounts.add(t["payer"], {"balance": -amount})
            accounts.add(t["payee"], {"balance": amount})
        else:
            accounts.put(t["payer"], {"balance": payer["balance"] - amount})
            accounts.put(t["payee"], {"balance": payee["balance"] + amount})
        return "done"

    def count(ctx: TxnContext, t: Record) -> str:
        """A stock count at two sites of an item, one audit more at each, if the first
        holds `n` units (only promises change `qty`, which the bound covers). Below PL3,
        or with formulas, by `add`; at PL3 and PL4 each row read and written whole, which
        loses an update if the read is not the row as it stands."""
        stock = ctx.table(TABLE)
        keys = [(t["item"], t["a"]), (t["item"], t["b"])]
        rows = [row for row in map(stock.get, keys) if row is not None]
        if len(rows) < 2:
            return "no_row"
        if rows[0]["qty"] < t["n"]:
            return "short"
        for k, row in zip(keys, rows, strict=True):
            if spanning.formulas or spanning.isolation.epochs:
                stock.add(k, {"audits": 1})
            else:
                stock.put(k, {**row, "audits": row["audits"] + 1})
        return "counted"

    @app.procedure(
        input=moves,
        outputs=[outcomes],
        touches=touches,
        isolation=spanning.isolation,
        epoch=spanning.epoch,
    )
    def shift(ctx: TxnContext, batch: Sequence[Record]) -> None:
        """Spanning: each tuple a transfer or a count, its outcome emitted."""
        for t in batch:
            outcome = transfer(ctx, t) if t["kind"] == "transfer" else count(ctx, t)
            ctx.emit("outcomes", {"seq": t["seq"], "outcome": outcome})

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
# ("promise", "base") goes to its partition's promises topic, a batch of the spanning stream
# to every partition of its topic, the rest to the coordinator.
KINDS = {
    "batch": 10,
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


@dataclass(frozen=True)
class Batch:
    """A batch of the spanning stream: each tuple a transfer or a count."""

    batch_id: int
    tuples: tuple[Record, ...]


@dataclass(frozen=True)
class Mark:
    """A producer's progress mark on the spanning stream: every batch up to `batch_id` that
    touches this partition has been sent to it."""

    batch_id: int


@dataclass
class Expected:
    qty: int = 0
    audits: int = 0
    prices: set[int] = field(default_factory=lambda: {0})


def model(
    txns: list[Txn], rows: list[Row], counts: list[Record], outcomes: Mapping[int, str]
) -> dict[Row, Expected]:
    """Each row as the committed transactions leave it, from the clients' view alone: the
    quantity its restocks and reservations add up to, its audits (the transactions' and the
    counts the spanning batches emitted as done), the prices it may hold."""
    out = {row: Expected() for row in rows}
    for c in counts:
        if outcomes.get(c["seq"]) == "counted":
            out[(c["item"], c["a"])].audits += 1
            out[(c["item"], c["b"])].audits += 1
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

    def seed_rows(self, rows: list[Row], accounts: Mapping[int, int]) -> None:
        """The initial rows, committed as any group is (so a crash replays them too)."""
        group = CommitGroup()
        for item, site in rows:
            group.ws.put(TABLE, (item, site), initial_row(item, site))
        for account, balance in accounts.items():
            group.ws.put(ACCOUNTS, (account,), {"account": account, "balance": balance})
        self.base.apply(group)

    def start(self) -> None:
        """As `PartitionTask.open`: the engine built, the store restored, state loaded."""
        partitions = self.sim.partitions
        self.engine = PartitionEngine(
            self.sim.dataflow,
            self.base,
            self.p,
            {},
            owner=lambda key: partition_of(key, partitions),
            partitions=partitions,
        )
        behind = self.base.restore()
        prepared = self.engine.load()
        seen = self.sim.seen
        if self.restarts:  # what the restart found: the crash paths this run took
            promised = self.engine.participant.promises
            seen["store behind"] += behind > 0
            seen["prepared reloaded"] += bool(prepared)
            seen["promise reloaded"] += bool(promised.held)
            seen["landing reloaded"] += bool(promised.landing)
        self.received = {t: self.engine.position(t) for t in self.sim.engine_topics}
        self.deferred.clear()
        self.deferred_requests = 0
        # as the task: other input waits until the spanning topic is read to its end now
        self.engine.spans.catch_up(MOVES, len(self.sim.moves[self.p]))
        seen["caught up"] += self.engine.spans.catching_up and bool(self.restarts)

    def crash(self) -> None:
        """The process died: the group and the deferred records are gone, the store is back
        to its last flush; then it starts again."""
        self.base.crash()
        self.restarts += 1
        self.start()

    def record(self, topic: str, offset: int) -> EngineRequest | Decision | Batch | Mark:
        if topic == MOVES:
            return self.sim.moves[self.p][offset]
        if topic == TOPICS.decisions:
            return self.sim.decisions[self.p][offset]
        if topic == TOPICS.promises:
            return self.sim.promises[self.p][offset]
        return self.sim.requests[self.p][offset]

    def unread(self) -> list[str]:
        """The topics with records to read; while the spanning input catches up after a
        start, per-partition input is paused (`InputRouter.held_back`)."""
        sim, p = self.sim, self.p
        ends = {TOPICS.requests: len(sim.requests[p]), TOPICS.decisions: len(sim.decisions[p]),
                TOPICS.promises: len(sim.promises[p]), MOVES: len(sim.moves[p]),
                EXCHANGE: len(sim.exchange[p])}  # fmt: skip
        held = (TOPICS.requests, TOPICS.promises) if self.engine.spans.catching_up else ()
        return [t for t in sim.engine_topics if self.received[t] < ends[t] and t not in held]

    def read(self, topic: str) -> None:
        """The next record of `topic`, handled as `InputRouter.handle` does."""
        offset = self.received[topic]
        self.received[topic] = offset + 1
        if topic == EXCHANGE:
            self.engine.spans.receive(self.sim.exchange[self.p][offset], (topic, self.p, offset))
            self.drain()
        elif topic == TOPICS.decisions:
            self.process(topic, offset)
            self.drain()
        elif self.deferred and topic == TOPICS.requests and self.read_ahead(offset):
            self.sim.seen["query ahead"] += 1
        elif self.deferred or not self.process(topic, offset):
            self.deferred.append((topic, offset))
            self.deferred_requests += topic == TOPICS.requests
            self.sim.seen["deferred"] += 1
        self.reach_end()

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
        self.reach_end()

    def reach_end(self) -> None:
        """The spanning topic is read up to where nothing of it waits among the deferred."""
        if not any(t == MOVES for t, _ in self.deferred):
            self.engine.spans.reached(MOVES, self.received[MOVES])

    def process(self, topic: str, offset: int) -> bool:
        """One record; False if it must wait (nothing applied): for a decision, or for
        spanning batches queued ahead of it, or, a spanning batch, for per-partition work
        to commit (`SpanRunner.holds`)."""
        record = self.record(topic, offset)
        spans = self.engine.spans
        if isinstance(record, Batch):
            if spans.holds(spanning=True) or self.engine.blocked:
                return False
            tuples = [dict(t) for t in record.tuples]
            self.engine.process(MOVES, record.batch_id, tuples, (topic, self.p, offset))
            return True
        if isinstance(record, Mark):
            if spans.holds(spanning=True) or self.engine.blocked:
                return False
            self.engine.progress(MOVES, record.batch_id, (topic, self.p, offset))
            return True
        if isinstance(record, Decision):
            self.engine.decide(record)
        else:
            if topic == TOPICS.promises:  # named by its place, whatever its client named it
                record = replace(record, txn_id=promise_id(self.p, offset))
            if record.kind != "read" and spans.holds(spanning=False):
                return False  # it could write rows queued spanning batches have read
            if not self.engine.request(record):
                return False
        self.engine.journal_oltp(topic, offset)
        self.engine.set_position(topic, offset + 1)
        return True

    def send(self) -> None:
        """The engine's reads for spanning batches, sent at once, outside its transaction."""
        outbox = self.engine.spans.outbox
        for q, reads in outbox:
            self.sim.exchange[q].append(reads)
        outbox.clear()

    def commit(self) -> None:
        """The group's state, replies and outputs, atomically (one Kafka transaction), its
        reads sent first; then what waited for it goes on (`PartitionTask._post_commit`)."""
        if self.engine.group.empty:
            return
        self.send()
        group = self.engine.take_group()
        self.base.apply(group)
        self.sim.replies.extend(group.replies)
        self.sim.outputs += [t for out in group.outputs for t in out.tuples]
        if self.deferred:
            self.drain()
            self.send()

    def reinquire(self) -> None:
        self.engine.reinquire(0.0)

    @property
    def idle(self) -> bool:
        p = self.engine.participant
        return (
            not self.unread()
            and not self.deferred
            and self.engine.group.empty
            and not self.engine.spans.queue
            and not self.engine.spans.outbox
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
        self.spanning = Spanning(
            rng.choice(list(Isolation)), rng.choice([3, 8]), rng.random() < 0.5
        )
        self.app = build_app(self.spanning)
        self.dataflow = self.app.dataflow()
        self.now = 0.0
        self.rows = self._rows(rng.randint(1, 2), rng.randint(2, 3))
        self.owner: dict[Row, int] = {r: partition_of(r, self.partitions) for r in self.rows}
        self.opening = {a: rng.randint(0, 60) for a in range(rng.randint(2, 4))}
        self.engine_topics = (TOPICS.requests, TOPICS.decisions, TOPICS.promises, MOVES,
                              EXCHANGE)  # fmt: skip
        # each engine topic's partitions: the coordinator's requests and decisions, and the
        # clients' promises
        self.requests: list[list[EngineRequest]] = [[] for _ in range(self.partitions)]
        self.decisions: list[list[Decision]] = [[] for _ in range(self.partitions)]
        self.promises: list[list[EngineRequest]] = [[] for _ in range(self.partitions)]
        # the spanning stream (each batch on every partition, or, `routed`, on those it
        # touches with a mark to the others), and the engines' reads
        self.routed = rng.random() < 0.7
        self.moves: list[list[Batch | Mark]] = [[] for _ in range(self.partitions)]
        self.exchange: list[list[Reads]] = [[] for _ in range(self.partitions)]
        self.batches: list[Batch] = []
        self.outputs: list[Record] = []  # the outcomes the spanning batches emitted
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
            mine = {a: b for a, b in self.opening.items() if self.account_owner(a) == node.p}
            node.seed_rows([r for r in self.rows if self.owner[r] == node.p], mine)
            node.start()
        self.coordinator = CoordinatorNode(self)
        self.coordinator.start()
        self.steps = 0

    def account_owner(self, account: int) -> int:
        return partition_of((account,), self.partitions)

    @property
    def submitted(self) -> int:
        """Transactions and spanning batches the clients have sent."""
        return len(self.txns) + len(self.batches)

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
        if kind == "batch":
            self.submit_batch()
            return
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

    def submit_batch(self) -> None:
        """A batch of transfers and counts, to the partitions it touches with a progress
        mark to the others (or, not `routed`, to every partition), at once (one transaction
        of its producer)."""
        rng, tuples = self.rng, []
        seq = sum(len(b.tuples) for b in self.batches)
        touched: set[int] = set()  # the partitions owning a key it declares
        for i in range(rng.randint(1, 4)):
            if rng.random() < 0.6:
                accounts = list(self.opening)
                payer, payee = rng.choice(accounts), rng.choice(accounts)
                tuples.append({"kind": "transfer", "seq": seq + i, "payer": payer,
                               "payee": payee, "amount": rng.randint(1, 40)})  # fmt: skip
                touched |= {self.account_owner(payer), self.account_owner(payee)}
            else:
                item = rng.choice(self.rows)[0]
                a, b = rng.sample([r for r in self.rows if r[0] == item], 2)
                tuples.append({"kind": "count", "seq": seq + i, "item": item, "a": a[1],
                               "b": b[1], "n": rng.randint(0, 5)})  # fmt: skip
                touched |= {self.owner[a], self.owner[b]}
        batch = Batch(len(self.batches) + 1, tuple(tuples))
        self.batches.append(batch)
        if not self.routed:
            touched = set(range(self.partitions))
        for p, log in enumerate(self.moves):
            log.append(batch if p in touched else Mark(batch.batch_id))

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
        if self.submitted < self.transactions:
            moves.append((3.0, self.submit))
        for node in self.nodes:
            unread = node.unread()
            if unread:
                moves.append((3.0, partial(node.read, rng.choice(unread))))
            if not node.engine.group.empty:
                moves.append((1.0, node.commit))
            if node.engine.spans.outbox:
                moves.append((1.0, node.send))
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
        while self.submitted < self.transactions:
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
                if node.engine.spans.outbox:
                    node.send()
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
            and self.submitted == self.transactions
        )

    def waiting(self) -> str:
        out = []
        for n in self.nodes:
            p = n.engine.participant
            out.append(
                f"engine {n.p}: unread {n.unread()}, deferred {list(n.deferred)}, queued "
                f"{[(e.batch_id, e.state.value) for e in n.engine.spans.queue]}, prepared "
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
        outcomes: dict[int, str] = {}
        for out in self.outputs:
            if out["seq"] in outcomes:
                return f"tuple {out['seq']} has two outcomes: {outcomes[out['seq']]}, {out}"
            outcomes[out["seq"]] = out["outcome"]
        tuples = [t for b in self.batches for t in b.tuples]
        if sorted(outcomes) != [t["seq"] for t in tuples]:
            return f"outcomes for {sorted(outcomes)}, not for the {len(tuples)} tuples sent"
        problem = self.check_transfers(outcomes)
        if problem is not None:
            return problem
        stored = self.stored()
        counts = [t for t in tuples if t["kind"] == "count"]
        expected = model(self.txns, self.rows, counts, outcomes)
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

    def check_transfers(self, outcomes: Mapping[int, str]) -> str | None:
        """The transfers' outcomes and the balances equal the serial reference at the
        procedure's level (`bank.transfer_reference`, which shares no code with the engine):
        OLTP touches no account, so no interleaving changes them."""
        level = self.spanning
        batches = [[t for t in b.tuples if t["kind"] == "transfer"] for b in self.batches]
        want_outcomes, want = transfer_reference(
            self.opening, batches, level.isolation, level.epoch, level.formulas
        )
        have = {
            int(key[0]): int(row["balance"])
            for node in self.nodes
            for key, row in node.base.tables.get(ACCOUNTS, {}).items()
        }
        got = {seq: outcomes[seq] for seq in want_outcomes}
        if got != want_outcomes:
            wrong = {s: (o, want_outcomes[s]) for s, o in got.items() if o != want_outcomes[s]}
            return f"transfers at {level}: (outcome, the reference's) {wrong}"
        if have != want:
            return f"balances at {level}: {have}, the reference says {want}"
        return None

    def history(self, row: Row) -> str:
        """The transactions submitted on `row`, in submission order, as their clients saw
        them end."""
        lines = [f"  {t.text()}" for t in self.txns if row in t.rows]
        lines += [
            f"  batch {b.batch_id}: {t}"
            for b in self.batches
            for t in b.tuples
            if t["kind"] == "count" and row in ((t["item"], t["a"]), (t["item"], t["b"]))
        ]
        return "transactions on it:\n" + "\n".join(lines)

    def describe(self) -> str:
        restarts = [n.restarts for n in self.nodes]
        return (
            f"{self.partitions} partitions, {len(self.rows)} rows, {self.transactions} "
            f"transactions and batches, {self.spanning}, {self.steps} steps, flush chance "
            f"{self.flush}, engine restarts {restarts}, coordinator restarts "
            f"{self.coordinator.restarts}, log truncated: {self.truncate}"
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
