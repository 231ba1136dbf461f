"""The bank's 2PC transfers on a three-broker cluster while brokers, workers and the
active coordinator are killed.

Two workers share four partitions; two coordinators share the role, one active, one
standing by; each runs under its supervisor, as deployed. Brokers are SIGKILLed (and
started again on their data) or SIGSTOPped for a few seconds, a worker is SIGKILLed, and
the active coordinator is SIGKILLed: the standby must take over, and the killed one's
supervisor starts it again as the new standby. Transfers between accounts on different
partitions run throughout, and after each fault some must commit again. The money must be
conserved, the end state must be the opening balances plus exactly the transfers the
client was told committed, and no transaction may be decided twice.
"""

from __future__ import annotations

import random
import sys
import threading
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path

import pytest

from bank.dataflow import INITIAL_BALANCE
from tests.support.bank_cluster import BankCluster, assert_each_decided_once
from tests.support.chaos import Chaos, sigkill
from tests.support.kafka_env import cluster_settings
from tests.support.scale import scaled, seeds
from txstream.client import TxClient, fragment
from txstream.config import Settings
from txstream.kafka.routing import partition_of
from txstream.oltp.messages import TxnResult
from txstream.stack.cluster import KafkaCluster
from txstream.stack.supervisor import Policy, Supervised

pytestmark = pytest.mark.kafka

KILLS = scaled(2, 5)  # of each kind: broker SIGKILL/SIGSTOP, worker and coordinator SIGKILL
PARTITIONS, WORKERS, ACCOUNTS, IN_FLIGHT = 4, 2, 200, 8
RESULT_S = 150.0  # the coordinator answers by the request's timeout, once one is active
PROGRESS = 5  # transfers that must commit after each fault: the app serves again
# A killed coordinator restarted at once rejoins the group and may win the role before the
# standby does; restarted later, it leaves the takeover to the standby (~8 s).
STANDBY_FIRST_S = 20.0


class Roles:
    """The supervised coordinators and which of them holds the role, read from their logs
    (each incarnation logs "standing by" when it starts and "took over" when it serves)."""

    def __init__(self, services: list[Supervised]) -> None:
        self.services = services

    @staticmethod
    def role(service: Supervised) -> str:
        log = service.files.child_log
        text = log.read_text(errors="replace") if log.exists() else ""
        took, stood = text.rfind("took over"), text.rfind("standing by")
        return "none" if max(took, stood) < 0 else "active" if took > stood else "standby"

    @staticmethod
    def takeovers(service: Supervised) -> int:
        return service.files.child_log.read_text(errors="replace").count("took over")

    def active(self) -> list[Supervised]:
        return [s for s in self.services if s.child_pid() and self.role(s) == "active"]

    def settled(self) -> bool:
        """One active coordinator and every other one standing by."""
        roles = sorted(self.role(s) for s in self.services if s.child_pid())
        return roles == ["active"] + ["standby"] * (len(self.services) - 1)


class Load(threading.Thread):
    """2PC transfers, `IN_FLIGHT` at a time, until stopped; tallies what was committed."""

    def __init__(self, bank: BankCluster, seed: int) -> None:
        super().__init__(name="transfers", daemon=True)
        self.bank, self.rng = bank, random.Random(seed)
        self.by_partition: dict[int, list[int]] = {}
        for a in range(1, ACCOUNTS + 1):
            self.by_partition.setdefault(partition_of((a,), PARTITIONS), []).append(a)
        self.deltas: Counter[int] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.unknown = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def open(self, client: TxClient) -> None:
        for accounts in self.by_partition.values():
            while True:  # the stack may still be starting; opening is idempotent
                r = client.call([fragment(accounts[0], "open_accounts", accounts=accounts)], 30)
                if r.ok:
                    break

    def committed(self) -> int:
        return self.outcomes["committed"]

    def run(self) -> None:
        try:
            with self.bank.client(timeout_s=10) as client:
                self._transfers(client)
        except BaseException as e:
            self.error = e

    def _transfers(self, client: TxClient) -> None:
        pending: dict[Future[TxnResult], tuple[int, int, int]] = {}
        while not self.stop.is_set() or pending:
            while not self.stop.is_set() and len(pending) < IN_FLIGHT:
                pa, pb = self.rng.sample(sorted(self.by_partition), 2)
                a, b = (
                    self.rng.choice(self.by_partition[pa]),
                    self.rng.choice(self.by_partition[pb]),
                )
                amount = self.rng.randint(1, 20)
                moves = [fragment(a, "debit", account=a, amount=amount),
                         fragment(b, "credit", account=b, amount=amount)]  # fmt: skip
                pending[client.submit(moves)] = (a, b, amount)
            finished, _ = wait(pending, RESULT_S, FIRST_COMPLETED)
            for future in finished or list(pending):
                a, b, amount = pending.pop(future)
                if not future.done():
                    self.unknown += 1
                    continue
                result = future.result()
                self.outcomes[result.status] += 1
                if result.ok:
                    self.deltas[a] -= amount
                    self.deltas[b] += amount

    def finish(self) -> None:
        self.stop.set()
        self.join(RESULT_S + 30)
        assert not self.is_alive(), "a transfer outlived its own timeout"
        if self.error is not None:
            raise self.error


class BankChaos(Chaos):
    def __init__(
        self,
        settings: Settings,
        workers: list[Supervised],
        roles: Roles,
        load: Load,
        seed: int,
    ) -> None:
        kinds = ("broker-kill", "broker-stop", "worker-kill", "coordinator-kill")
        super().__init__(settings, seed, dict.fromkeys(kinds, KILLS))
        self.workers, self.roles, self.load = workers, roles, load

    def after(self, fault: str) -> None:
        """Until some transfers commit again: the app serves after every fault."""
        committed = self.load.committed()
        self.wait(lambda: self.load.committed() >= committed + PROGRESS,
                  f"transfers to commit after {fault}", 180)  # fmt: skip

    def worker_kill(self) -> None:
        i = self.rng.randrange(len(self.workers))
        sigkill(self.workers[i].child_pid(), f"worker {i}")

    def coordinator_kill(self) -> None:
        """SIGKILL the active one: the standby takes over, and the killed one's supervisor
        starts it again (after `STANDBY_FIRST_S`) as the new standby."""
        self.wait(self.roles.settled, "one active coordinator and a standby", 180)
        [active] = self.roles.active()
        [standby] = [s for s in self.roles.services if s is not active]
        took = Roles.takeovers(standby)
        sigkill(active.child_pid(), "the active coordinator")
        self.wait(lambda: Roles.takeovers(standby) > took, "the standby to take over", 120)


@pytest.mark.slow  # three brokers and ~20 faults: runs in make faults
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds([7], [7]))
def test_bank_conserves_money_with_brokers_workers_and_coordinators_killed(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = cluster_settings(tmp_path / "home")
    # the supervised services inherit the environment: point them at this private cluster
    monkeypatch.setenv("TXSTREAM_HOME", str(settings.home))
    monkeypatch.setenv("TXSTREAM_KAFKA_BOOTSTRAP", settings.bootstrap_servers)
    cluster = KafkaCluster(settings)
    cluster.start(lambda _: None)
    try:
        bank = BankCluster(settings, tmp_path, partitions=PARTITIONS)
        coordinators = [
            service(bank, f"coordinator-{i}", "coordinator", "run", restart_after_s=STANDBY_FIRST_S)
            for i in (1, 2)
        ]
        workers = [
            service(bank, f"worker-{i}", "worker", "run", "--instance-id", str(i))
            for i in range(WORKERS)
        ]
        roles = Roles(coordinators)
        load = Load(bank, seed)
        chaos = BankChaos(settings, workers, roles, load, seed)
        stop = threading.Event()
        try:
            for s in [coordinators[0], *workers]:
                s.start()
            with bank.client(timeout_s=30) as client:
                load.open(client)
            coordinators[1].start()
            chaos.wait(roles.settled, "one active coordinator and a standby", 120)
            load.start()
            chaos.run(stop)
            load.finish()
            with bank.client(timeout_s=30) as client:
                got = {k[0]: row["balance"] for k, row in client.query("accounts").table_rows()}
                total = bank.totals(client)["sum_balance"]
            restarts = {s.files.name: s.restarts() for s in [*coordinators, *workers]}
        finally:
            stop.set()
            load.stop.set()
            for s in [*coordinators, *workers]:
                s.stop()
        assert len(chaos.done) == 4 * KILLS, chaos.done
        assert sum(restarts.values()) >= 2 * KILLS, restarts
        assert load.unknown == 0, f"{load.unknown} transfers got no outcome"
        assert load.committed() > 20 * KILLS, load.outcomes
        assert total == ACCOUNTS * INITIAL_BALANCE, f"money made or lost: {total}"
        expected = {a: INITIAL_BALANCE + load.deltas[a] for a in range(1, ACCOUNTS + 1)}
        wrong = {a: (got.get(a), v) for a, v in expected.items() if got.get(a) != v}
        assert not wrong, f"{len(wrong)} balances differ from the committed transfers: " + str(
            list(wrong.items())[:5]
        )
        assert_each_decided_once(bank)
    finally:
        cluster.stop(lambda _: None)


def service(
    bank: BankCluster, name: str, *command: str, restart_after_s: float = 0.1
) -> Supervised:
    """A bank service under its supervisor, restarted whenever it dies, as deployed."""
    app = ["--app", "bank.dataflow:from_params", "--params", bank.params]
    ms = int(restart_after_s * 1000)
    policy = Policy(max_restarts=100, window_s=60.0, backoff_ms=ms, backoff_max_ms=max(ms, 1000))
    argv = [str(Path(sys.executable).with_name("txstream")), *command, *app]
    return Supervised(name, argv, bank.settings, policy=policy)
