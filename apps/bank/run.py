"""`txstream bank run`: TSpoon's bank transfers on a real stack, with crashes on demand.

It starts the workers and the coordinator under supervisors, opens the accounts, keeps
`in_flight` transfers going from one client, and meanwhile asks snapshot queries for the
total money and the lowest balance. With kills asked for, it SIGKILLs the coordinator and
the workers (round robin) at evenly spaced points of the run; their supervisors restart
them. Every snapshot and the end state must show the money conserved and no negative
balance; the report says whether they did.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from bank.dataflow import INITIAL_BALANCE
from txstream.client import OltpTimeout, TxClient, fragment
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import common_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.oltp.messages import TxnResult
from txstream.stack.supervisor import Policy, Supervised

TOTALS = [("sum", "balance"), ("min", "balance"), ("count", "")]
OPEN_CHUNK = 5000
MIXES = ("uniform", "single", "multi")


@dataclass(frozen=True)
class BankConfig:
    accounts: int = 100_000
    transfers: int = 10_000
    partitions: int = 4
    workers: int = 2
    in_flight: int = 64
    seed: int = 1
    kill_coordinator: int = 0
    kill_worker: int = 0
    snapshot_every_s: float = 1.0
    timeout_s: float = 10.0
    name: str = "bank"
    mix: str = (
        "uniform"  # uniform (TSpoon), single or multi (both accounts in one partition or not)
    )
    direct_via: str = "kafka"  # how single-partition transfers reach their engine (TxClient)

    def __post_init__(self) -> None:
        for what in ("accounts", "partitions", "workers", "in_flight"):
            if getattr(self, what) < 1:
                raise ValueError(f"--{what.replace('_', '-')} must be at least 1")
        if self.accounts < 2:
            raise ValueError("--accounts must be at least 2 for a transfer")
        if self.transfers < 0 or self.kill_coordinator < 0 or self.kill_worker < 0:
            raise ValueError("--transfers and kill counts cannot be negative")
        if self.direct_via not in ("kafka", "endpoint"):
            raise ValueError(f"--direct-via must be kafka or endpoint, not {self.direct_via!r}")
        if self.mix not in MIXES:
            raise ValueError(f"--mix must be one of {', '.join(MIXES)}, not {self.mix!r}")
        if self.mix == "multi" and self.partitions < 2:
            raise ValueError("--mix multi needs at least 2 partitions")


@dataclass
class Snapshot:
    at_s: float
    total: int
    lowest: int
    accounts: int


@dataclass
class BankReport:
    config: BankConfig
    outcomes: dict[str, int] = field(default_factory=dict)  # "single committed", ...
    unknown: int = 0  # no result in time
    elapsed_s: float = 0.0
    snapshots: list[Snapshot] = field(default_factory=list)
    unanswered_snapshots: int = 0
    final: Snapshot | None = None
    kills: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)

    @property
    def expected_total(self) -> int:
        return self.config.accounts * INITIAL_BALANCE

    def violations(self) -> list[str]:
        bad = []
        for s in [*self.snapshots, *([self.final] if self.final else [])]:
            if s.total != self.expected_total or s.lowest < 0:
                bad.append(f"at {s.at_s:.1f}s: total {s.total}, lowest balance {s.lowest}")
        if self.final is None:
            bad.append("no final snapshot")
        elif self.final.accounts != self.config.accounts:
            bad.append(f"{self.final.accounts} accounts at the end, not {self.config.accounts}")
        return bad

    def rate(self, kind: str) -> float:
        n = sum(v for k, v in self.outcomes.items() if k.startswith(kind))
        return n / self.elapsed_s if self.elapsed_s else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            **asdict(self),
            "expected_total": self.expected_total,
            "violations": self.violations(),
            "transfers_per_s": {k: round(self.rate(k), 1) for k in ("single", "multi", "")},
        }


class BankRun:
    def __init__(self, config: BankConfig, settings: Settings | None = None) -> None:
        self.config = config
        self.settings = settings or Settings()
        self.topics = AppTopics(config.name)
        self.report = BankReport(config)
        self._started = 0.0
        self._done = threading.Event()
        # The net change of each account by the transfers reported committed: with no
        # unknown outcomes, the end state must be exactly the opening balances plus these.
        self.deltas: Counter[int] = Counter()

    def services(self) -> list[Supervised]:
        params = json.dumps({"name": self.config.name})
        app = ["--app", "bank.dataflow:from_params", "--params", params]
        txstream = str(Path(sys.executable).with_name("txstream"))
        policy = Policy(max_restarts=100, window_s=60.0, backoff_ms=100, backoff_max_ms=1000)
        coordinator = Supervised(
            f"{self.config.name}-coordinator",
            [txstream, "coordinator", "run", *app],
            self.settings,
            policy=policy,
        )
        workers = [
            Supervised(
                f"{self.config.name}-worker-{i}",
                [txstream, "worker", "run", *app, "--instance-id", str(i)],
                self.settings,
                policy=policy,
            )
            for i in range(self.config.workers)
        ]
        return [coordinator, *workers]

    def run(self, progress: Callable[[int, int], None] = lambda done, total: None) -> BankReport:
        c = self.config
        admin = TopicAdmin(self.settings)
        ensure_topics(admin, self.topics, ["payroll", "payouts"], c.partitions, oltp=True)
        found = len(admin.partitions(self.topics.requests))
        if found != c.partitions:
            raise ValueError(
                f"app {c.name!r} already has {found} partitions, not {c.partitions}: "
                "choose another --name"
            )
        services = self.services()
        for s in services:
            s.start()
        try:
            with TxClient(c.name, self.settings, timeout_s=c.timeout_s,
                          direct_via=c.direct_via) as client:  # fmt: skip
                self._open_accounts(client)
                self._wait_for_workers()
                self._started = time.monotonic()
                checker = threading.Thread(target=self._snapshots, args=(client,), daemon=True)
                checker.start()
                self._transfers(client, services, progress)
                self.report.elapsed_s = time.monotonic() - self._started
                self._done.set()
                checker.join()
                self.report.final = self._snapshot(client, attempts=10)
        finally:
            self._done.set()
            for s in services:
                self.report.restarts[s.files.name] = s.restarts()
                s.stop()
        return self.report

    def _wait_for_workers(self, timeout_s: float = 120.0) -> None:
        """Until every worker is in the group and the partitions are spread: a rebalance
        inside the measured run would stall it."""
        admin = AdminClient(common_config(self.settings))
        group = f"txstream-{self.config.name}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            desc = admin.describe_consumer_groups([group])[group].result(30)
            if desc.state == ConsumerGroupState.STABLE and len(desc.members) == self.config.workers:
                return
            self._done.wait(0.2)
        raise RuntimeError(f"the {self.config.workers} workers did not join {group} in time")

    def _owned(self) -> dict[int, list[int]]:
        owned: dict[int, list[int]] = {}
        for a in range(self.config.accounts):
            owned.setdefault(partition_of((a,), self.config.partitions), []).append(a)
        return owned

    def _pairs(self, rng: random.Random) -> Callable[[], tuple[int, int]]:
        """Two distinct accounts, uniformly, or restricted to one partition or to two."""
        c = self.config
        if c.mix == "uniform":

            def uniform() -> tuple[int, int]:
                a, b = rng.sample(range(c.accounts), 2)
                return a, b

            return uniform
        owned = [accts for accts in self._owned().values() if len(accts) >= 2]

        def pair() -> tuple[int, int]:
            if c.mix == "single":
                a, b = rng.sample(rng.choice(owned), 2)
            else:
                pa, pb = rng.sample(owned, 2)
                a, b = rng.choice(pa), rng.choice(pb)
            return a, b

        return pair

    def _open_accounts(self, client: TxClient) -> None:
        owned = self._owned()
        chunks = [
            accts[i : i + OPEN_CHUNK]
            for accts in owned.values()
            for i in range(0, len(accts), OPEN_CHUNK)
        ]
        for chunk in chunks:
            for _ in range(30):  # the stack may still be starting; opening is idempotent
                try:
                    r = client.call([fragment(chunk[0], "open_accounts", accounts=chunk)], 30)
                except OltpTimeout:
                    continue
                if r.ok:
                    break
            else:
                raise RuntimeError(f"could not open accounts {chunk[0]}..{chunk[-1]}")

    def _transfers(
        self, client: TxClient, services: list[Supervised], progress: Callable[[int, int], None]
    ) -> None:
        c = self.config
        rng = random.Random(c.seed)
        pair = self._pairs(rng)
        kills = _kill_plan(c, services)
        pending: dict[Future[TxnResult], tuple[int, int, int]] = {}
        # Answered transfers queue up as they come: `wait()` over every pending future at
        # each step costs the client's Python in proportion to the transfers in flight.
        answered: queue.SimpleQueue[Future[TxnResult]] = queue.SimpleQueue()
        sent = done = 0
        while done < c.transfers:
            while sent < c.transfers and len(pending) < c.in_flight:
                a, b = pair()
                amount = rng.randint(1, 100)
                moves = [
                    fragment(a, "debit", account=a, amount=amount),
                    fragment(b, "credit", account=b, amount=amount),
                ]
                submitted = client.submit(moves)
                pending[submitted] = (a, b, amount)
                submitted.add_done_callback(answered.put)
                sent += 1
            # Results are taken as they come, so one slow transfer does not hold the others'
            # places; the coordinator answers every request by its timeout, this covers its
            # absence: whatever is still pending then has an unknown outcome.
            try:
                finished = [answered.get(timeout=c.timeout_s + 30)]
                while not answered.empty():
                    finished.append(answered.get_nowait())
            except queue.Empty:
                finished = list(pending)
            for future in finished:
                moved = pending.pop(future, None)
                if moved is None:  # answered after it was counted unknown
                    continue
                a, b, amount = moved
                done += 1
                if not future.done():
                    self.report.unknown += 1
                    continue
                result = future.result()
                self._count(result)
                if result.ok:
                    self.deltas[a] -= amount
                    self.deltas[b] += amount
            progress(done, c.transfers)
            while kills and kills[0][0] <= done:
                _, service = kills.pop(0)
                if _sigkill(service):
                    name = "coordinator" if "coordinator" in service.files.name else "worker"
                    self.report.kills[name] = self.report.kills.get(name, 0) + 1

    def _count(self, r: TxnResult) -> None:
        kind = "single" if len(r.partitions) == 1 else "multi"
        label = f"{kind} {r.status}" + (f" ({r.reason})" if r.reason else "")
        self.report.outcomes[label] = self.report.outcomes.get(label, 0) + 1

    def _snapshots(self, client: TxClient) -> None:
        while not self._done.wait(self.config.snapshot_every_s):
            snap = self._snapshot(client)
            if snap is not None:
                self.report.snapshots.append(snap)

    def _snapshot(self, client: TxClient, attempts: int = 1) -> Snapshot | None:
        for _ in range(attempts):
            try:
                r = client.query("accounts", aggregates=TOTALS, timeout_s=self.config.timeout_s)
            except OltpTimeout:
                r = None
            if r is not None and r.ok:
                row = r.table_rows()[0][1]
                at = time.monotonic() - self._started
                return Snapshot(at, row["sum_balance"], row["min_balance"], row["count"])
            self.report.unanswered_snapshots += 1
        return None


def _kill_plan(c: BankConfig, services: list[Supervised]) -> list[tuple[int, Supervised]]:
    """(transfers done, service) pairs, evenly spread over the middle of the run."""
    coordinator, workers = services[0], services[1:]
    plan = [
        (c.transfers * (i + 1) // (c.kill_coordinator + 1), coordinator)
        for i in range(c.kill_coordinator)
    ]
    plan += [
        (c.transfers * (2 * i + 1) // (2 * c.kill_worker + 2), workers[i % len(workers)])
        for i in range(c.kill_worker)
    ]
    return sorted(plan, key=lambda p: p[0])


def _sigkill(service: Supervised) -> bool:
    """SIGKILL the service's current child (checked by pid and command line)."""
    pid = service.child_pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL)
    return True


def summary(report: BankReport) -> list[str]:
    c = report.config
    lines = [
        f"{c.transfers} transfers over {c.accounts} accounts on {c.partitions} partitions, "
        f"{c.workers} workers, in {report.elapsed_s:.1f}s: "
        f"{report.rate(''):.0f}/s ({report.rate('single'):.0f} single-, "
        f"{report.rate('multi'):.0f} multi-partition)",
    ]
    for label, n in sorted(Counter(report.outcomes).items()):
        lines.append(f"  {label}: {n}")
    if report.unknown:
        lines.append(f"  no result in time: {report.unknown}")
    lines.append(f"kills: {report.kills or 'none'}; restarts: {report.restarts}")
    lines.append(
        f"snapshots: {len(report.snapshots)} answered, "
        f"{report.unanswered_snapshots} unanswered; final: {report.final}"
    )
    bad = report.violations()
    lines.append("money conserved, no negative balance" if not bad else f"VIOLATIONS: {bad}")
    return lines
