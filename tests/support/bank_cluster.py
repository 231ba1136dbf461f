"""A bank app on the real broker: worker and coordinator processes a test starts, kills
(SIGKILL, at failpoints) and restarts, and a client to drive it."""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka import Producer

from bank.run import TOTALS
from tests.support.kafka_reads import read_to_end
from tests.support.sequencer_driver import unique
from tests.support.service_cluster import ServiceCluster
from tests.support.service_process import ServiceProcess
from txstream.client import OltpTimeout, TxClient, fragment
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.oltp.messages import CoordinatorLog, Decision, TxnResult, Wire
from txstream.oltp.origin import Origin
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry


class BankCluster(ServiceCluster):
    def __init__(
        self, settings: Settings, tmp: Path, partitions: int = 2, recovery: str = "changelog"
    ) -> None:
        self.settings, self.tmp, self.partitions = settings, tmp, partitions
        self.name = unique("bank2pc").replace("-", "_")
        self.topics = AppTopics(self.name)
        ensure_topics(
            TopicAdmin(settings), self.topics, ["payroll", "payouts"], partitions, oltp=True
        )
        self.params = json.dumps({"name": self.name, "recovery": recovery})
        self.processes: list[ServiceProcess] = []
        self._next_account = 0
        self.worker_metrics = 0  # the port a test gave its worker's metrics, if any

    def _start(self, args: list[str], log: str, failpoints: str) -> ServiceProcess:
        env = {"TXSTREAM_FAILPOINTS": failpoints} if failpoints else {}
        app = ["--app", "bank.dataflow:from_params", "--params", self.params]
        proc = ServiceProcess(self.settings, [*args, *app], self.tmp / log, env)
        self.processes.append(proc)
        return proc

    def worker(
        self, failpoints: str = "", metrics_port: int | None = None, query_port: int = 0
    ) -> ServiceProcess:
        """A worker; its metrics on `metrics_port`, else on the cluster's `worker_metrics`
        port (so a replacement worker serves where the first one did); its query endpoint
        on `query_port` (0: any free port)."""
        port = self.worker_metrics if metrics_port is None else metrics_port
        args = ["worker", "run", "--metrics-port", str(port), "--query-port", str(query_port)]
        return self._start(args, "worker.log", failpoints)

    def coordinator(
        self,
        failpoints: str = "",
        http_port: int = 0,
        metrics_port: int = 0,
        log: str = "coordinator.log",
    ) -> ServiceProcess:
        """A coordinator; give each of several its own `log` to tell active from standby."""
        args = [
            "coordinator",
            "run",
            "--http-port",
            str(http_port),
            "--metrics-port",
            str(metrics_port),
        ]
        return self._start(args, log, failpoints)

    def accounts_apart(self) -> tuple[int, int]:
        """Two new accounts on different partitions: a transfer between them is 2PC."""
        first = self._new_account()
        while True:
            second = self._new_account()
            if partition_of((second,), self.partitions) != partition_of((first,), self.partitions):
                return first, second

    def _new_account(self) -> int:
        self._next_account += 1
        return self._next_account

    def open(self, client: TxClient, *accounts: int, timeout_s: float = 120) -> None:
        """Open the accounts, retrying while the stack is still coming up."""
        deadline = time.monotonic() + timeout_s
        for a in accounts:
            request_id = None
            while True:
                frags = [fragment(a, "open_accounts", accounts=[a])]
                try:
                    r = client.call(frags, 10, request_id=request_id)
                except OltpTimeout as e:  # no worker yet: ask again for the same outcome
                    request_id = e.request_id
                    assert time.monotonic() < deadline, f"could not open account {a}: no answer"
                    continue
                if r.ok:
                    break
                assert time.monotonic() < deadline, f"could not open account {a}: {r}"

    @staticmethod
    def transfer(
        client: TxClient, a: int, b: int, amount: int, timeout_s: float = 20.0
    ) -> TxnResult:
        return client.call(
            [
                fragment(a, "debit", account=a, amount=amount),
                fragment(b, "credit", account=b, amount=amount),
            ],
            timeout_s,
        )

    @staticmethod
    def balance(client: TxClient, account: int) -> int:
        r = client.query("accounts", key=(account,))
        assert r.ok, r
        rows = r.table_rows()
        assert rows, f"account {account} is not open"
        return int(rows[0][1]["balance"])

    @staticmethod
    def totals(client: TxClient, isolation: str = "snapshot") -> dict[str, int]:
        r = client.query("accounts", aggregates=TOTALS, isolation=isolation)
        assert r.ok, r
        return r.table_rows()[0][1]

    def payroll(self, partition: int, batch_id: int, lines: list[tuple[int, int, int]]) -> None:
        """One payroll batch on `partition`: (employer, employee, amount) lines."""
        codec = BatchCodec(SchemaRegistry(self.settings.schema_dir).get("bank.Payment"))
        tuples = [{"employer": e, "employee": w, "amount": n} for e, w, n in lines]
        producer = Producer(idempotent_producer_config(self.settings))
        producer.produce(
            self.topics.stream("payroll"),
            codec.encode("payroll", batch_id, tuples),
            partition=partition,
        )
        assert producer.flush(30) == 0

    def account_on(self, partition: int) -> int:
        while True:
            a = self._new_account()
            if partition_of((a,), self.partitions) == partition:
                return a


def wait_for_text(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} did not appear in {path} within {timeout_s:.0f}s")


def decisions_by_txn(cluster: BankCluster) -> dict[str, set[tuple[int, bool]]]:
    """txn_id -> every (epoch, commit) any partition was sent for it."""
    wire = Wire(SchemaRegistry(cluster.settings.schema_dir), Origin.of(cluster.settings))
    seen: dict[str, set[tuple[int, bool]]] = {}
    for p in range(cluster.partitions):
        for _, value in read_to_end(cluster.settings, cluster.topics.decisions, p):
            d = wire.decode(Decision, value)
            seen.setdefault(d.txn_id, set()).add((d.epoch, d.commit))
    return seen


def logged_decisions(settings: Settings, topics: AppTopics) -> dict[str, list[bool]]:
    """txn_id -> the commit flag of each decision record in the coordinator log."""
    wire = Wire(SchemaRegistry(settings.schema_dir), Origin.of(settings))
    out: dict[str, list[bool]] = {}
    for _, value in read_to_end(settings, topics.coordinator_log):
        r = wire.decode(CoordinatorLog, value)
        if r.kind == "decision":
            out.setdefault(r.txn_id, []).append(r.commit)
    return out


def assert_each_decided_once(cluster: BankCluster) -> None:
    """No transaction decided twice in the coordinator log, nor sent to its participants
    decided two ways or at two epochs."""
    logged = logged_decisions(cluster.settings, cluster.topics)
    twice = {t: c for t, c in logged.items() if len(c) > 1}
    assert not twice, f"decided more than once: {twice}"
    two_ways = {t: s for t, s in decisions_by_txn(cluster).items() if len(s) > 1}
    assert not two_ways, f"decided two ways or at two epochs: {two_ways}"
