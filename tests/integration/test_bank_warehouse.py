"""The bank's warehouse, built by the generic ETL from the app's declarations: every epoch
of its mirrors shows the money the engines hold, although a 2PC transfer commits once on
each of its two partitions.

The coordinator drops the decision to one participant and is SIGKILLed right after logging
it, so one partition applies the transfer and the other holds it prepared for as long as
the test wants. A load of the warehouse then must not show one side without the other
(the consistent cut, `txstream_etl/cut.py`); once a new coordinator resends the decision,
the next load shows both. The same holds at every epoch of a streaming load beside many
transfers in flight, its driver SIGKILLed three times, and beside spanning transfers. All
three run in `make faults` (two Spark runs or more each; `make test` keeps the cut's unit
tests and the engines' commit-end marks, `test_serializable_queries.py`).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from bank.stream_transfers import build_app as build_transfers
from orders.commits import CommitWatch
from tests.simulation.test_spanning import serial_transfers
from tests.support.bank_cluster import BankCluster
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.openings import send_openings, send_routed
from tests.support.service_process import ServiceProcess
from tests.support.simulation.spanning import random_transfers
from tests.support.spark_jvms import gone
from txstream.client import fragment
from txstream.commit.markers import COMMIT_END_HEADER
from txstream.config import Settings, project_root
from txstream.engine.participant import PREPARED_TABLE
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.declarations import Record
from txstream.oltp.messages import Fragment, TxnResult
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.keys import decode_key
from txstream_etl.epochs import NoSuchEpoch, tables_at
from txstream_etl.tables import ETL_COMMITS_TABLE, HELD_TABLE, table_path

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.faults]

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")
KILLED = -signal.SIGKILL
OPENING = 100  # each account's balance when opened


@pytest.fixture
def cluster(kafka: KafkaEnv, tmp_path: Path) -> Iterator[BankCluster]:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    c = BankCluster(settings, tmp_path)
    c.worker()
    try:
        yield c
    finally:
        c.stop_all()


class Warehouse:
    """`txstream describe` and `txstream etl run --once` for a bank app: the 2PC one
    (`bank.dataflow`) by default."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        tmp_path: Path,
        params: str,
        dataflow: str = "bank.dataflow:from_params",
    ) -> None:
        self.root = tmp_path / "wh" / name
        self.env = {**os.environ, "TXSTREAM_HOME": str(settings.home),
                    "TXSTREAM_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
                    "TXSTREAM_WAREHOUSE_URI": str(tmp_path / "wh")}  # fmt: skip
        self.app = ["--app", name]
        described = self._run(["describe", "--app", dataflow, "--params", params,
                               "--format", "warehouse"], 60)  # fmt: skip
        self.config = tmp_path / "bank.toml"
        self.config.write_text(described)
        self.mirrors = tmp_path / "bank-mirrors.toml"  # the engines' tables alone
        blocks = described.split("\n\n")
        self.mirrors.write_text("\n\n".join(b for b in blocks if b.startswith("[[mirror]]")))

    def _run(self, args: list[str], timeout_s: float) -> str:
        done = subprocess.run([TXSTREAM, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    def load(self) -> None:
        self._run(["etl", "run", "--once", "--no-metrics", *self.app,
                   "--config", str(self.config)], 500)  # fmt: skip

    def epochs(self) -> list[int]:
        """The changelog query's micro-batches recorded so far."""
        marks = DeltaTable(table_path(str(self.root), ETL_COMMITS_TABLE.name))
        return sorted(r["etl_batch"] for r in _rows(marks) if r["query"] == "changelog")

    def balances(self, etl_batch: int | None = None) -> dict[int, int]:
        """Each account's balance as of one epoch (the newest by default)."""
        _, tables = tables_at(self.root, "changelog", etl_batch)
        return {r["account"]: r["balance"] for r in _rows(tables["accounts"])}

    def count(self, table: str, what: str = "*") -> int:
        """Rows of a table (as it stands), or distinct values of `what`."""
        try:
            delta = DeltaTable(table_path(str(self.root), table))
        except TableNotFoundError:
            return 0
        query = f"SELECT count(*) AS n FROM (SELECT {what} FROM t)"
        reader = QueryBuilder().register("t", delta).execute(query)
        return int(pa.table(reader.read_all()).to_pylist()[0]["n"])

    def held(self) -> int:
        return len(_rows(DeltaTable(table_path(str(self.root), HELD_TABLE.name))))

    def held_at_some_epoch(self) -> bool:
        """Whether some micro-batch left records waiting past its cut."""
        table = DeltaTable(table_path(str(self.root), HELD_TABLE.name))
        return any(
            int(c.get("operationMetrics", {}).get("numOutputRows", 0)) > 0
            for c in table.history()
            if c.get("operation") == "WRITE"
        )


def _rows(table: DeltaTable) -> list[dict[str, Any]]:
    reader = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return list(pa.table(reader.read_all()).to_pylist())


def applied_somewhere(cluster: BankCluster, deadline_s: float = 60) -> int:
    """The partition whose changelog shows a prepared transaction applied (its prepared row
    deleted), once one does."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for p in range(cluster.partitions):
            for msg in read_to_committed_end(cluster.settings, cluster.topics.changelog, p):
                if msg.value() is None and decode_key(msg.key() or b"")[0] == PREPARED_TABLE:
                    return p
        time.sleep(0.2)
    raise AssertionError("no partition applied the transfer")


def commits_end_marked(cluster: BankCluster) -> None:
    """Every partition's changelog ends with a record marking the end of its last commit."""
    for p in range(cluster.partitions):
        msgs = list(read_to_committed_end(cluster.settings, cluster.topics.changelog, p))
        assert msgs, f"partition {p} has no changelog"
        assert COMMIT_END_HEADER in dict(msgs[-1].headers() or []), f"partition {p}"


@pytest.mark.slow  # two Spark runs beside a held 2PC transfer (~2 min): faults
@pytest.mark.timeout(900)
def test_a_2pc_transfer_lands_in_the_warehouse_on_both_partitions_at_once(
    cluster: BankCluster, tmp_path: Path
) -> None:
    warehouse = Warehouse(cluster.settings, cluster.name, tmp_path, cluster.params)
    dropping = cluster.coordinator("coordinator.drop_decision=drop,coordinator.after_decision=kill")
    with cluster.client(timeout_s=120) as client:
        a, b = cluster.accounts_apart()
        others = [cluster.account_on(p) for p in range(cluster.partitions)]
        cluster.open(client, a, b, *others)
        accounts = [a, b, *others]
        total = OPENING * len(accounts)
        pending = client.submit(transfer(a, b, 30), timeout_s=120)
        assert dropping.wait_exit(60) == KILLED
        applied_somewhere(cluster)
        warehouse.load()
        first = warehouse.balances()
        assert sum(first.values()) == total, first
        assert (first[a], first[b]) == (OPENING, OPENING), "one side of the transfer landed"
        assert warehouse.held() > 0

        restarted = cluster.coordinator()
        try:
            assert client.wait(pending, 60).ok
            balances = {x: cluster.balance(client, x) for x in accounts}
            assert (balances[a], balances[b]) == (OPENING - 30, OPENING + 30)
            warehouse.load()
        finally:
            restarted.terminate()
    commits_end_marked(cluster)
    assert warehouse.balances() == balances
    assert warehouse.held() == 0
    epochs = warehouse.epochs()
    assert len(epochs) >= 2
    for n in epochs:
        assert sum(warehouse.balances(n).values()) == total, n


@pytest.mark.slow  # a streaming ETL beside 2PC load (~5 min): make faults
@pytest.mark.timeout(1200)
def test_every_epoch_of_a_streaming_load_holds_the_money_the_engines_hold(
    cluster: BankCluster, tmp_path: Path
) -> None:
    """Transfers between partitions, many in flight, while the ETL loads every half second
    and its driver is SIGKILLed three times right after a table commit (a mirror's, or what
    waits past the cut): each epoch the warehouse recorded shows the total the engines
    hold, and the last one every balance as the engines committed it."""
    warehouse = Warehouse(cluster.settings, cluster.name, tmp_path, cluster.params)
    coordinator = cluster.coordinator()
    etl = StreamingEtl(warehouse, cluster.name, tmp_path)
    rng = random.Random(7)
    try:
        with cluster.client(timeout_s=120) as client:
            accounts = [a for _ in range(8) for a in cluster.accounts_apart()]
            cluster.open(client, *accounts)
            total = OPENING * len(accounts)
            etl.start()
            started = _epochs_once_running(warehouse, etl)
            pending: list[Future[TxnResult]] = []
            deadline = time.monotonic() + 600
            for n in itertools.count():
                a, b = rng.sample(accounts, 2)
                pending.append(client.submit(transfer(a, b, rng.randint(1, 20)), timeout_s=60))
                if len(pending) >= 32:
                    client.wait(pending.pop(0), 60)
                if n % 100 == 0:
                    etl.check()
                    assert time.monotonic() < deadline, f"{etl.kills} not reached in time"
                    if not etl.kills and len(warehouse.epochs()) >= started + EPOCHS_UNDER_LOAD:
                        break
            outcomes = [client.wait(f, 60) for f in pending]
            assert any(r.ok for r in outcomes)
            engines = {x: cluster.balance(client, x) for x in accounts}
        assert sum(engines.values()) == total
        _wait_caught_up(warehouse, etl, engines)
    finally:
        etl.stop()
        coordinator.terminate()
    assert etl.runs == 1 + len(KILLS)
    epochs = warehouse.epochs()
    assert len(epochs) >= EPOCHS_UNDER_LOAD, epochs
    for n in epochs:
        assert sum(warehouse.balances(n).values()) == total, f"epoch {n}"
    assert warehouse.held_at_some_epoch(), "no micro-batch left anything past its cut"


KILLS = tuple(f"etl.after_table_commit=kill@{n}" for n in (4, 5, 3))


class StreamingEtl:
    """`txstream etl run` in the background, SIGKILLed at its failpoints and started again
    each time, until the kills are spent; then it runs on."""

    def __init__(
        self,
        warehouse: Warehouse,
        app: str,
        tmp_path: Path,
        kills: tuple[str, ...] = KILLS,
        config: Path | None = None,
    ) -> None:
        self.warehouse, self.app, self.tmp_path = warehouse, app, tmp_path
        self.kills = list(kills)
        self.config = config or warehouse.config
        self.runs = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        w = self.warehouse
        argv = [TXSTREAM, "etl", "run", *w.app, "--config", str(self.config), "--no-metrics",
                "--trigger-s", "0.5"]  # fmt: skip
        env = {**w.env, "TXSTREAM_FAILPOINTS": self.kills[0] if self.kills else ""}
        with (self.tmp_path / f"etl-{self.runs}.log").open("wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.runs += 1

    def check(self) -> None:
        """Start it again after a kill it was armed for; any other exit fails the test."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            return
        assert code == KILLED and self.kills, f"the ETL exited with {code}, kills left {self.kills}"
        self.kills.pop(0)
        assert gone(self.app, 60), "Spark outlived its SIGKILLed driver"
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(30)
        assert gone(self.app, 60), "Spark outlived its SIGKILLed driver"


EPOCHS_UNDER_LOAD = 8


def _epochs_once_running(warehouse: Warehouse, etl: StreamingEtl) -> int:
    """Wait for the ETL's first changelog epoch (Spark starts in 10-20 s); how many now."""
    deadline = time.monotonic() + 180
    while True:
        try:
            if epochs := warehouse.epochs():
                return len(epochs)
        except TableNotFoundError:
            pass
        etl.check()
        assert time.monotonic() < deadline, "the ETL recorded no epoch"
        time.sleep(0.5)


def transfer(a: int, b: int, amount: int) -> list[Fragment]:
    return [
        fragment(a, "debit", account=a, amount=amount),
        fragment(b, "credit", account=b, amount=amount),
    ]


def _wait_caught_up(warehouse: Warehouse, etl: StreamingEtl, engines: dict[int, int]) -> None:
    """Until the newest epoch shows the engines' balances, while the ETL runs."""
    deadline = time.monotonic() + 300
    while not _caught_up(warehouse, engines):
        etl.check()
        assert time.monotonic() < deadline, "the warehouse did not catch up"
        time.sleep(0.5)


def _caught_up(warehouse: Warehouse, engines: dict[int, int]) -> bool:
    try:
        return warehouse.balances() == engines
    except (NoSuchEpoch, TableNotFoundError, KeyError):
        return False


@pytest.mark.slow  # a streaming ETL beside spanning transfers (~3 min): faults
@pytest.mark.timeout(900)
def test_every_epoch_holds_the_money_of_spanning_transfers(kafka: KafkaEnv, tmp_path: Path) -> None:
    """TSpoon's transfers as a spanning procedure (`bank.stream_transfers`): each batch
    commits a part on every engine it touches. On 4 partitions and 2 workers, while the ETL
    loads every half second, every epoch shows the money opened, and the last one the
    serial execution's balances; the transfers, each batch on the partitions it touches, are
    each in their fact once (the copy on its lowest participant is the one loaded)."""
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    rng = random.Random(9)
    opening = {a: rng.randint(0, 100) for a in range(SPAN_ACCOUNTS)}
    batches: list[list[Record]] = []
    app = build_transfers(f"spanwh-{uuid.uuid4().hex[:8]}")
    topics = AppTopics(app.name)
    ensure_app_topics(TopicAdmin(settings), app, SPAN_PARTITIONS)
    registry = SchemaRegistry(settings.schema_dir)
    params = json.dumps({"name": app.name})
    dataflow = "bank.stream_transfers:from_params"
    warehouse = Warehouse(settings, app.name, tmp_path, params, dataflow)
    spec = ["--app", "bank.stream_transfers:from_params", "--params", params]
    workers = [
        ServiceProcess(settings, ["worker", "run", *spec, "--instance-id", str(i), "--no-metrics"],
                       tmp_path / f"worker-{i}.log")
        for i in range(2)
    ]  # fmt: skip
    # the mirrors stream beside the load; the facts are loaded once after it
    etl = StreamingEtl(warehouse, app.name, tmp_path, kills=(), config=warehouse.mirrors)
    watch = CommitWatch(settings, topics.commits, SPAN_PARTITIONS)
    producer = Producer(idempotent_producer_config(settings))
    alive = lambda: all(w.alive() for w in workers)  # noqa: E731
    try:
        opens = BatchCodec(registry.get("bank.Opening"))
        per_partition = send_openings(producer, topics, opens, opening, SPAN_PARTITIONS)
        assert producer.flush(60) == 0
        watch.wait({"opens": per_partition}, 120, alive)
        etl.start()
        started = _epochs_once_running(warehouse, etl)
        moves = BatchCodec(registry.get("bank.Transfer"))
        deadline = time.monotonic() + 600
        # Transfers go on, a few hundred batches ahead of the engines, until the ETL has
        # recorded enough epochs while they ran.
        while len(warehouse.epochs()) < started + SPAN_EPOCHS:
            etl.check()
            assert time.monotonic() < deadline, "the ETL recorded too few epochs in time"
            ahead = max(0, len(batches) - 400)
            watch.wait({"transfers": [ahead] * SPAN_PARTITIONS}, 200, alive)
            chunk = [random_transfers(rng, SPAN_ACCOUNTS, SPAN_K) for _ in range(100)]
            send_routed(producer, topics, moves, chunk, SPAN_PARTITIONS, len(batches) + 1)
            assert producer.flush(60) == 0
            batches += chunk
        watch.wait({"transfers": [len(batches)] * SPAN_PARTITIONS}, 200, alive)
        expected = serial_transfers(opening, [t for b in batches for t in b])
        _wait_caught_up(warehouse, etl, expected)
    finally:
        etl.stop()
        watch.close()
        for w in workers:
            w.kill()
        kill_leftovers(settings.home)
    epochs = warehouse.epochs()
    assert len(epochs) >= started + SPAN_EPOCHS, epochs
    total = sum(opening.values())
    for n in epochs:
        assert sum(warehouse.balances(n).values()) == total, f"epoch {n}"
    # each transfers batch is on its participants; the fact holds each transfer once
    warehouse.load()
    sent = len(batches) * SPAN_K
    assert warehouse.count("transfers") == sent
    assert warehouse.count("transfers", "DISTINCT batch_id, seq") == sent
    assert warehouse.count("transfer_outcomes") == sent


SPAN_PARTITIONS, SPAN_ACCOUNTS, SPAN_K, SPAN_EPOCHS = 4, 40, 4, 6
