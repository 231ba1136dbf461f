"""A seeded simulation of one partition engine's OLTP and stream work, committed the way
a live worker commits it, against the same work committed one record at a time.

Real code driven: `PartitionEngine` with its participant (2PC prepare and decision,
single-partition runs, promises held for SERIALIZE and their decisions, queries),
`StateCodec` and `CommittedState` over a real RocksDB `StateStore`, and the pipelined
group commit as `PartitionTask.start_commit`/`finish_commit` drive it: a group taken in
flight (`take_group(in_flight=True)`), the next one reading through it, its writes
encoded (as the commit thread does, at any point before its finish) and applied to the
store, then `committed()`. Commits start and finish at random points between records.

Optionally, handovers: what a rebalance does to a partition that moves to another worker
(no kill needed; two workers starting do it): commit, then a new engine over the same
store, which holds again what was prepared or promised and not decided or landed.

The reference is what `txstream verify` replays: the same records in the same order on an
engine over in-memory state (`txstream.testing.MemoryState`), each committed on its own,
never restarted. A record that must wait (a 2PC lock; a stream batch while anything is
prepared) is deferred with all after it but decisions, as `PartitionTask` defers it.
Not modelled: Kafka (a commit never fails here), the coordinator (decisions are drawn at
random, each for a transaction the engine voted on or promised), crashes.

Per seed the invariant is: every record gets the same outcome and reply from both, and
at the end the live store's tables equal the reference's. `Simulation.shrink` cuts a
diverging list of events down to a few.
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from txstream import App, Record, TxnContext
from txstream.config import Settings
from txstream.engine.group import CommitGroup
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import promise_id
from txstream.oltp.messages import Decision, EngineReply, EngineRequest, Fragment, Query
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import EncodedWrites, StateCodec, table_rows
from txstream.state.committed import CommittedState
from txstream.state.store import StateStore
from txstream.testing import MemoryState

ACCOUNTS = 6
USER_TABLES = ("accounts", "sales", "totals")


class Open(TypedDict):
    account: int
    balance: int
    extra: int


class Move(TypedDict):
    account: int
    amount: int


class Account(TypedDict):
    account: int


UNITS = "sum(units) >= 0"


def build_app() -> App:
    """A bank: accounts opened by a put and an add, moved by add() formulas and by plain
    read-modify-write puts, closed by a delete, from stream batches and OLTP transactions
    alike; each account's sales, under an aggregation constraint (units change only by
    promises, orders by anyone); and an audit batch that scans every account."""
    app = App("oltp_pipeline")
    app.table("accounts", schema="bank.Account", key=("account",))
    app.table("sales", schema="orders.Sales", key=("account",), aggregates=[UNITS])
    app.table("totals", schema="chain.Total", key=("name",))
    payroll = app.stream("payroll", schema="bank.Payment", key_field="employer")
    audits = app.stream("audits", schema="chain.Item")
    payouts = app.stream("payouts", schema="bank.Payment")

    @app.transaction(params=Open)
    def open_account(ctx: TxnContext, params: Record) -> int:
        """Open the account if it is not (a put), then pay in `extra` (an add)."""
        accounts, key = ctx.table("accounts"), params["account"]
        if accounts.get(key) is None:
            accounts.put(key, {"balance": params["balance"]})
        return int(accounts.add(key, {"balance": params["extra"]})["balance"])

    @app.transaction(params=Move)
    def credit(ctx: TxnContext, params: Record) -> int:
        """An add() formula."""
        row = ctx.table("accounts").add(params["account"], {"balance": params["amount"]})
        return int(row["balance"])

    @app.transaction(params=Move)
    def deposit(ctx: TxnContext, params: Record) -> int:
        """A plain read-modify-write put."""
        accounts = ctx.table("accounts")
        row = accounts.get(params["account"])
        if row is None:
            ctx.abort("no_account", f"account {params['account']} is not open")
        assert row is not None
        balance = int(row["balance"]) + int(params["amount"])
        accounts.put(params["account"], {"balance": balance})
        return balance

    @app.transaction(params=Account)
    def close_account(ctx: TxnContext, params: Record) -> int:
        accounts = ctx.table("accounts")
        if accounts.get(params["account"]) is None:
            return 0
        accounts.delete(params["account"])
        return 1

    @app.transaction(params=Move)
    def sell_open(ctx: TxnContext, params: Record) -> int:
        """Promised: open the account's sales row (a put of zeros), then sell (an add)."""
        sales, key = ctx.table("sales"), params["account"]
        if sales.get(key) is None:
            sales.put(key, {"orders": 0, "units": 0})
        return int(sales.add(key, {"units": params["amount"]})["units"])

    @app.transaction(params=Move)
    def sell(ctx: TxnContext, params: Record) -> int:
        """Promised: an add() to the constrained sum."""
        return int(ctx.table("sales").add(params["account"], {"units": params["amount"]})["units"])

    @app.transaction(params=Account)
    def count_order(ctx: TxnContext, params: Record) -> int:
        """Anyone: an add() to a field no constraint sums."""
        return int(ctx.table("sales").add(params["account"], {"orders": 1})["orders"])

    @app.transaction(params=Account)
    def stamp_order(ctx: TxnContext, params: Record) -> int:
        """Anyone: a plain put that leaves the constrained sum as it is."""
        sales = ctx.table("sales")
        row = sales.get(params["account"])
        if row is None:
            ctx.abort("no_sales", f"account {params['account']} has no sales row")
        assert row is not None
        sales.put(params["account"], {**row, "orders": row["orders"] + 1})
        return int(row["orders"]) + 1

    @app.procedure(input=payroll)
    def pay(ctx: TxnContext, batch: Sequence[Record]) -> None:
        """The employer's balance by a put, the employee's by an add."""
        accounts = ctx.table("accounts")
        for line in batch:
            employer = accounts.get(line["employer"])
            if employer is not None:
                accounts.put(line["employer"], {"balance": employer["balance"] - line["amount"]})
            if accounts.get(line["employee"]) is not None:
                accounts.add(line["employee"], {"balance": line["amount"]})
            if ctx.table("sales").get(line["employee"]) is not None:
                ctx.table("sales").add(line["employee"], {"orders": 1})

    @app.procedure(input=payroll, outputs=[payouts])
    def withhold(ctx: TxnContext, batch: Sequence[Record]) -> None:
        """A nested transaction's first member: the employer pays by an add, or it aborts
        the whole transaction if it has no account."""
        for line in batch:
            if ctx.table("accounts").get(line["employer"]) is None:
                ctx.abort("no_account", "no employer")
            ctx.table("accounts").add(line["employer"], {"balance": -line["amount"]})
            ctx.emit("payouts", line)

    @app.procedure(input=payouts)
    def payout(ctx: TxnContext, batch: Sequence[Record]) -> None:
        """Its second member: each employee is paid by a put."""
        for line in batch:
            row = ctx.table("accounts").get(line["employee"])
            if row is not None:
                ctx.table("accounts").put(line["employee"], {"balance": row["balance"] + 1})

    app.nested("payday", [withhold, payout])

    @app.procedure(input=audits)
    def audit(ctx: TxnContext, batch: Sequence[Record]) -> None:
        """Scans every account: the total balance, and how many audits saw it."""
        total = sum(row["balance"] for _, row in ctx.table("accounts").scan())
        totals = ctx.table("totals")
        seen = totals.get("all")
        count = 0 if seen is None else seen["batches"]
        totals.put("all", {"value": total, "batches": count + 1})

    return app


@dataclass(frozen=True)
class Op:
    """One input record: an OLTP request, a stream batch, or a decision on the transaction
    that the request `of` (its request id) prepared or promised."""

    kind: str  # run | prepare | promise | read | batch | decide
    request: EngineRequest | None = None
    batch: tuple[tuple[int, int, int], ...] = ()  # (employer, employee, amount); () audits
    of: str = ""
    commit: bool = True

    def text(self) -> str:
        if self.request is not None:
            r = self.request
            if r.kind == "read":
                return f"read {r.query}"
            frags = ", ".join(f"{f.procedure}{f.params}" for f in r.fragments)
            return f"{r.kind} {r.request_id}: {frags}"
        if self.kind == "decide":
            return f"decide {self.of} {'commit' if self.commit else 'abort'}"
        return f"batch {list(self.batch)}"


# What happens next: a record arrives (Op), or the live engine's commit moves on: "start"
# (`start_commit`, encoding at once or not), "encode" (the commit thread encodes the group
# in flight), "finish" (`finish_commit`), "handover" (commit, close, reopen).
Event = Op | str


class Engine:
    """One engine and the way its groups commit: `live` pipelined over RocksDB, or not
    (the reference) over memory, each record its own group."""

    def __init__(self, app: App, codec: StateCodec, store: StateStore | None) -> None:
        df = app.dataflow()
        self.store = store
        self.state: CommittedState | MemoryState
        if store is None:
            self.state = MemoryState()
        else:
            self.state = CommittedState(store, codec)
        self.codec = codec
        self.engine = PartitionEngine(df, self.state, 0, {}, flat_tables=codec.flat_tables)
        self.in_flight: tuple[CommitGroup, EncodedWrites | None] | None = None
        self.next_offset = 0
        self.batch_id = 0

    @property
    def live(self) -> bool:
        return self.store is not None

    def handle(self, op: Op, decision: Decision | None) -> tuple[bool, list[EngineReply]]:
        """Apply one record; False if it must wait (nothing applied)."""
        group = self.engine.group
        before = len(group.replies)
        if decision is not None:
            self.engine.decide(decision)
            applied = True
        elif op.request is not None:
            applied = self.engine.request(op.request)
        else:
            if self.engine.blocked:
                return False, []
            self.batch_id += 1
            if op.batch:
                lines = [{"employer": a, "employee": b, "amount": n} for a, b, n in op.batch]
                self.engine.process("payroll", self.batch_id, lines)
            else:
                self.engine.process("audits", self.batch_id, [{"key": 0, "value": 0}])
            applied = True
        replies = list(self.engine.group.replies[before:])
        if not self.live:
            self.commit_now()
        return applied, replies

    def commit_now(self) -> None:
        group = self.engine.take_group()
        assert isinstance(self.state, MemoryState)
        self.state.apply(group)

    def start_commit(self, encode_now: bool) -> None:
        """`PartitionTask.start_commit`: finish the commit in flight, then send the group."""
        self.finish_commit()
        if self.engine.group.empty:
            return
        group = self.engine.take_group(in_flight=True)
        self.in_flight = (group, self.codec.encode_writes(group.ws) if encode_now else None)

    def encode(self) -> None:
        """The commit thread encodes the group in flight, at some point before its finish."""
        if self.in_flight is not None and self.in_flight[1] is None:
            group, _ = self.in_flight
            self.in_flight = (group, self.codec.encode_writes(group.ws))

    def finish_commit(self) -> None:
        """`PartitionTask.finish_commit`: the group in flight into RocksDB, then
        `committed()`."""
        if self.in_flight is None:
            return
        self.encode()
        _, writes = self.in_flight
        assert writes is not None and isinstance(self.state, CommittedState)
        self.in_flight = None
        if writes:
            self.next_offset += len(writes)
            self.state.apply(writes, self.next_offset)
        self.engine.committed()

    def hand_over(self, app: App) -> None:
        """A clean handover (a rebalance): commit, then a new engine over the store, which
        holds again what was prepared or promised (`PartitionTask.open`)."""
        self.start_commit(encode_now=True)
        self.finish_commit()
        assert self.store is not None
        self.state = CommittedState(self.store, self.codec)
        df = app.dataflow()
        self.engine = PartitionEngine(df, self.state, 0, {}, flat_tables=self.codec.flat_tables)
        self.engine.load()

    def tables(self) -> dict[str, dict[Any, Record]]:
        if isinstance(self.state, MemoryState):
            tables = self.state.tables
            return {t: dict(rows) for t, rows in tables.items() if t in USER_TABLES and rows}
        assert self.store is not None
        return {
            t: rows
            for t, rows in table_rows(self.codec, dict(self.store.scan(b""))).items()
            if t in USER_TABLES
        }


@dataclass
class Divergence:
    at: int  # the event it was seen at
    what: str
    live: Any
    reference: Any


class Driver:
    """Feeds records to both engines as `PartitionTask` does: a record that must wait (on
    a 2PC lock, or a stream batch while anything is prepared) is deferred with everything
    after it but decisions, which run at once and then drain the deferred."""

    def __init__(self, app: App, codec: StateCodec, store: StateStore) -> None:
        self.app = app
        self.live = Engine(app, codec, store)
        self.reference = Engine(app, codec, None)
        self.deferred: deque[Op] = deque()
        self.ids: dict[str, str] = {}  # request id -> the transaction it voted or promised
        self.replies: list[EngineReply] = []  # the live engine's, every one so far
        self.divergence: Divergence | None = None
        self.at = 0

    def event(self, event: Event, at: int) -> None:
        self.at = at
        if event == "start":
            self.live.start_commit(encode_now=True)
        elif event == "start_later":
            self.live.start_commit(encode_now=False)
        elif event == "encode":
            self.live.encode()
        elif event == "finish":
            self.live.finish_commit()
        elif event == "handover":
            self.live.hand_over(self.app)
        else:
            assert isinstance(event, Op)
            self.offer(event)

    def offer(self, op: Op) -> None:
        if op.kind == "decide":
            txn = self.ids.pop(op.of, None)
            if txn is None:
                return  # not voted or promised (yet): the coordinator has nothing to decide
            self._process(op, Decision(txn, 1, op.commit))
            while self.deferred and self._process(self.deferred[0]):
                self.deferred.popleft()
        elif self.deferred or not self._process(op):
            self.deferred.append(op)

    def _process(self, op: Op, decision: Decision | None = None) -> bool:
        ok, replies = self.live.handle(op, decision)
        ref_ok, ref_replies = self.reference.handle(op, decision)
        self.replies += replies
        for r in replies:
            if r.ok and r.kind in ("vote", "promise"):
                self.ids[r.request_id] = r.txn_id
        mine, theirs = [_reply(r) for r in replies], [_reply(r) for r in ref_replies]
        if self.divergence is None and (ok, mine) != (ref_ok, theirs):
            self.divergence = Divergence(self.at, op.text(), (ok, mine), (ref_ok, theirs))
        return ok

    def end(self) -> None:
        """Every transaction still awaiting a decision is committed, and so is the group."""
        for request_id in list(self.ids):
            self.offer(Op("decide", of=request_id))
        self.live.start_commit(encode_now=True)
        self.live.finish_commit()
        mine, theirs = self.live.tables(), self.reference.tables()
        if self.divergence is None and mine != theirs:
            self.divergence = Divergence(self.at, "the tables at the end", mine, theirs)


def _reply(r: EngineReply) -> tuple[Any, ...]:
    return (r.txn_id, r.kind, r.ok, r.reason, r.results, r.rows)


def txn_id(kind: str, n: int) -> str:
    """The `n`th request's transaction id: a promise's names its place in the promises topic
    (`promise_id`), as the task names it; a coordinator's is `<epoch>.<seq>`."""
    return promise_id(0, n) if kind == "promise" else f"1.{n}"


class Workload:
    """Random records over a few accounts, and the commit's steps between them."""

    def __init__(self, rng: random.Random, handovers: float) -> None:
        self.rng = rng
        self.handovers = handovers
        self.requests = 0
        self.awaiting: list[str] = []  # request ids of prepares and promises

    def account(self) -> int:
        return self.rng.randrange(ACCOUNTS)

    def fragment(self, kind: str) -> Fragment:
        kinds = ["open_account", "credit", "deposit", "close_account", "count_order",
                 "stamp_order"]  # fmt: skip
        if kind == "promise":
            kinds += ["sell_open", "sell", "sell_open"]
        proc = self.rng.choice(kinds)
        a = self.account()
        if proc == "open_account":
            balance, extra = self.rng.choice([0, 10, 50]), self.rng.choice([0, 7, 10])
            return Fragment.call(a, proc, account=a, balance=balance, extra=extra)
        if proc in ("close_account", "count_order", "stamp_order"):
            return Fragment.call(a, proc, account=a)
        return Fragment.call(a, proc, account=a, amount=self.rng.choice([-10, -3, 1, 10]))

    def record(self) -> Op:
        rng = self.rng
        if self.awaiting and rng.random() < 0.25:
            of = self.awaiting.pop(rng.randrange(len(self.awaiting)))
            return Op("decide", of=of, commit=rng.random() < 0.8)
        kind = rng.choice(["run", "prepare", "promise", "read", "batch"])
        if kind == "batch" and rng.random() < 0.2:
            return Op(kind)  # an audit
        if kind == "batch":
            n = rng.randint(1, 3)
            return Op(kind, batch=tuple((self.account(), self.account(), 1 + i) for i in range(n)))
        self.requests += 1
        rid = f"r{self.requests}"
        if kind == "read":
            table = rng.choice(USER_TABLES[:2])
            if rng.random() < 0.5:
                query = Query(table, "read_committed", json.dumps([self.account()]))
            else:  # a scan
                query = Query(table, "read_committed", aggregates=json.dumps([["count", ""]]))
            return Op(kind, EngineRequest(rid, 1, kind, rid, "client", [], query))
        frags = [self.fragment(kind) for _ in range(rng.randint(1, 2))]
        if kind != "run":
            self.awaiting.append(rid)
        return Op(kind, EngineRequest(txn_id(kind, self.requests), 1, kind, rid, "client", frags))

    def events(self, records: int) -> list[Event]:
        out: list[Event] = []
        for _ in range(records):
            out.append(self.record())
            roll = self.rng.random()
            if roll < 0.15:
                out.append("start")
            elif roll < 0.3:
                out.append("start_later")
            elif roll < 0.45:
                out.append("finish")
            elif roll < 0.55:
                out.append("encode")
            elif roll < 0.55 + self.handovers:
                out.append("handover")
        return out


class Simulation:
    """Runs lists of events, each on a fresh RocksDB under `tmp`."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.app = build_app()
        self.codec = StateCodec(self.app.dataflow(), SchemaRegistry(Settings().schema_dir))
        self.runs = 0

    def check(self, events: Sequence[Event]) -> Divergence | None:
        self.runs += 1
        store = StateStore.open(self.tmp / f"db-{self.runs}")
        try:
            driver = Driver(self.app, self.codec, store)
            for i, event in enumerate(events):
                driver.event(event, i)
                if driver.divergence is not None:
                    return driver.divergence
            driver.end()
            return driver.divergence
        finally:
            store.close()
            StateStore.wipe(self.tmp / f"db-{self.runs}")

    def shrink(self, events: list[Event]) -> list[Event]:
        """A shorter list that still diverges: chunks left out while it does, halving."""
        found = self.check(events)
        assert found is not None
        events = events[: found.at + 1]
        n = len(events) // 2
        while n >= 1:
            i = 0
            while i < len(events):
                trial = events[:i] + events[i + n :]
                if self.check(trial) is not None:
                    events = trial
                else:
                    i += n
            n //= 2
        return events


def generate(seed: int, records: int = 200, handovers: float = 0.0) -> list[Event]:
    return Workload(random.Random(seed), handovers).events(records)


def describe(events: Sequence[Event]) -> str:
    return "\n".join(e.text() if isinstance(e, Op) else f"  <{e}>" for e in events)
