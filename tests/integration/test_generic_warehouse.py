"""A warehouse from declarations alone: the sales app runs on the broker, `txstream describe
--format warehouse` writes its file, and `txstream etl run --once` (Spark, Delta) loads it,
with no code of the app in the job: the mirrors equal the engines' committed tables, and
the facts hold every committed output tuple once. It loads on the native stack's Spark
standalone cluster (a master and two workers); local mode is the Leaderboard ETL test's."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from orders.sales import reference
from orders.sales_run import SalesRun, sales_events
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.killer import kill_leftovers
from tests.support.spark_jvms import KILLED_BY_ITS_MIRRORS, gone, mirrors_driver
from txstream.config import Settings, project_root
from txstream.kafka.routing import partition_of
from txstream.model.declarations import Record
from txstream.stack.spark import SparkMaster, SparkWorker, master_state
from txstream.stack.stack import Stack

pytestmark = [pytest.mark.spark, pytest.mark.faults]

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")
PARTITIONS = 2


def rows(root: Path, table: str) -> list[dict[str, Any]]:
    reader = QueryBuilder().register("t", DeltaTable(str(root / table))).execute("SELECT * FROM t")
    return list(pa.table(reader.read_all()).to_pylist())


@dataclass
class Loaded:
    """The sales app's committed run, its generated warehouse file, and how to call the CLI."""

    app: str
    config: Path
    env: dict[str, str]
    events: list[Record]
    totals: list[Record]
    customers: dict[int, tuple[int, int]]
    items: dict[int, tuple[int, int]]

    def etl(self, *args: str) -> None:
        done = subprocess.run(
            [TXSTREAM, "etl", *args, "--app", self.app, "--config", str(self.config)],
            env=self.env, capture_output=True, text=True, timeout=500, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def sales(kafka: KafkaEnv, tmp_path: Path) -> Loaded:
    """The sales app run on the broker to its last commit, and its warehouse file."""
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    events = sales_events(seed=3, n=120)
    batches = [events[i : i + 4] for i in range(0, len(events), 4)]
    customers, items, totals = reference(batches, lambda c: partition_of((c,), PARTITIONS))
    run = SalesRun(settings, PARTITIONS, workers=1)
    try:
        run.start()
        run.produce(events, batch_size=4)
        run.wait_committed(200)
    finally:
        run.stop()
        kill_leftovers(settings.home)
    env = {**os.environ, "TXSTREAM_HOME": str(settings.home),
           "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap,
           "TXSTREAM_WAREHOUSE_URI": str(tmp_path / "wh")}  # fmt: skip
    described = subprocess.run(
        [TXSTREAM, "describe", "--app", "orders.sales:from_params", "--format", "warehouse"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    config = tmp_path / "sales.toml"
    config.write_text(described.stdout)
    return Loaded(run.app.name, config, env, events, totals, customers, items)


@pytest.fixture
def spark_cluster(kafka: KafkaEnv, tmp_path: Path) -> Iterator[Settings]:
    """A master and two workers of one core each, in their own home, stopped by pid."""
    settings = kafka.settings.model_copy(
        update={"home": tmp_path / "spark-home", "spark_workers": 2,
                "spark_master_port": free_port(), "spark_ui_port": free_port()}
    )  # fmt: skip
    stack = Stack(settings)
    cluster: list[SparkMaster | SparkWorker] = [stack.spark_master, *stack.spark_workers]
    started: list[SparkMaster | SparkWorker] = []
    try:
        for component in cluster:
            component.start()
            started.append(component)
        yield settings
    finally:
        for component in reversed(started):
            component.process.stop()


@pytest.mark.slow  # a Spark cluster and a load (~90 s): runs in make faults
@pytest.mark.timeout(600)
def test_the_etl_loads_an_app_from_its_declarations_on_a_spark_cluster(
    kafka: KafkaEnv, tmp_path: Path, spark_cluster: Settings
) -> None:
    s = sales(kafka, tmp_path)
    master = SparkMaster(spark_cluster)
    s.env["TXSTREAM_SPARK_MASTER"] = master.url
    s.etl("run", "--once", "--no-metrics")
    state = master_state(spark_cluster)
    assert state is not None and len(state["workers"]) == 2
    ran = [a for a in state["completedapps"] if a["name"] == f"txstream-etl-{s.app}"]
    assert ran and ran[0]["cores"] >= 1, state["completedapps"]
    assert_loaded(tmp_path / "wh" / s.app, s)


def assert_loaded(root: Path, s: Loaded) -> None:
    """Mirrors equal to the engines' tables, every output tuple and event in its fact once."""
    item_sales = {r["item"]: (r["orders"], r["units"]) for r in rows(root, "item_sales")}
    assert item_sales == s.items
    assert {r["customer"]: (r["orders"], r["units"]) for r in rows(root, "customer_sales")} == (
        s.customers
    )
    placed = rows(root, "placed")
    assert len(placed) == len({(r["customer"], r["order_id"]) for r in placed}) == len(s.totals)
    landed = sorted((r["tuple_seq"], r["item"], r["orders"]) for r in rows(root, "item_totals"))
    assert landed == sorted((t["seq"], t["item"], t["orders"]) for t in s.totals)  # renamed
    assert len(rows(root, "sales_events")) == len(s.events)


@pytest.mark.slow  # four Spark runs (~4 min): runs in make faults
@pytest.mark.timeout(1200)
def test_the_etl_sigkilled_three_times_loads_every_row_once(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    """The ETL, in two drivers (`--split-drivers`), SIGKILLed (by pid) three times: its first
    driver twice, once it recorded one more micro-batch of 5 records, right after the next
    micro-batch's first table commit (its other tables and its record not yet written, the
    window the re-run check is for); then its mirrors' driver, right after its first mirror
    commit of the run (or at a random moment, if the mirrors hold everything already), upon
    which the first stops and exits as the killed one did. Then run to the end: every table
    as if it had never been killed."""
    s = sales(kafka, tmp_path)
    root = tmp_path / "wh" / s.app
    pace = random.Random(22)
    argv = [TXSTREAM, "etl", "run", "--app", s.app, "--config", str(s.config), "--no-metrics",
            "--trigger-s", "0.5", "--max-batches-per-trigger", "5", "--split-drivers"]  # fmt: skip
    deadline = time.monotonic() + 900
    for n in range(2):
        before = micro_batches(root)
        with (tmp_path / f"etl-{n}.log").open("wb") as log:
            proc = subprocess.Popen(argv, env=s.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            until(proc, deadline, lambda: micro_batches(root), above=before)
            until(proc, deadline, lambda: data_commits(root), above=data_commits(root))
        finally:
            proc.kill()
            proc.wait(30)
        assert gone(s.app, 60), "Spark outlived its SIGKILLed driver"
    mirrors = [m["table"] for m in tomllib.loads(s.config.read_text())["mirror"]]
    mirrored = data_commits(root, mirrors)
    with (tmp_path / "etl-2.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=s.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        until(proc, deadline, lambda: int(mirrors_driver(proc.pid) is not None), 0)
        at_most = min(deadline, time.monotonic() + pace.uniform(20.0, 60.0))
        with contextlib.suppress(TimedOut):
            until(proc, at_most, lambda: data_commits(root, mirrors), above=mirrored)
        second = mirrors_driver(proc.pid)
        assert second is not None, "the mirrors' driver exited before its kill"
        os.kill(second, signal.SIGKILL)
        assert proc.wait(120) == KILLED_BY_ITS_MIRRORS
    finally:
        proc.kill()
        proc.wait(30)
    assert gone(s.app, 60), "Spark outlived its SIGKILLed drivers"
    assert micro_batches(root) >= 3
    s.etl("run", "--once", "--no-metrics")
    assert_loaded(root, s)


def until(
    proc: subprocess.Popen[bytes], deadline: float, count: Callable[[], int], above: int
) -> None:
    """Poll until `count` passes `above`, while the ETL runs and before the deadline."""
    while count() <= above:
        assert proc.poll() is None, f"the ETL exited early: {proc.args!r}"
        if time.monotonic() >= deadline:
            raise TimedOut
        time.sleep(0.05)


class TimedOut(AssertionError):
    """`until`'s deadline passed."""


def data_commits(root: Path, only: list[str] | None = None) -> int:
    """Delta commits of the app's tables so far (not the micro-batch records), or of some."""
    tables = [p for p in root.iterdir() if not p.name.startswith("_") and p.name != "etl_commits"]
    return sum(DeltaTable(str(p)).version() for p in tables if only is None or p.name in only)


def micro_batches(root: Path) -> int:
    try:
        return len(rows(root, "etl_commits"))
    except TableNotFoundError:
        return 0


@pytest.mark.slow  # two Spark runs (~3 min): runs in make faults
@pytest.mark.timeout(900)
def test_a_backfill_equals_the_warehouse_loaded_in_micro_batches(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    """The warehouse loaded in micro-batches of 15 records, then rebuilt in one go from the
    topics' start by `etl backfill`, which swaps it in and keeps the old one aside: every
    table equal, row for row."""
    s = sales(kafka, tmp_path)
    s.etl("run", "--once", "--no-metrics", "--max-batches-per-trigger", "15")
    s.etl("backfill")
    root = tmp_path / "wh" / s.app
    (kept,) = (tmp_path / "wh").glob(f".replaced-*/{s.app}")
    tables = sorted(p.name for p in kept.iterdir() if not p.name.startswith("_"))
    assert "etl_commits" in tables and "item_sales" in tables, tables
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith("_")) == tables
    assert len(rows(kept, "etl_commits")) > len(rows(root, "etl_commits")), "one micro-batch"
    for table in tables:
        if table != "etl_commits":  # micro-batch bookkeeping: one batch now, several before
            assert loaded(root, table) == loaded(kept, table), table
    assert not list((tmp_path / "wh").glob(".backfill-*")), "the staging copy was left behind"


def loaded(root: Path, table: str) -> list[str]:
    """The table's rows without the micro-batch that wrote each, as sortable text."""
    return sorted(
        repr(sorted((k, v) for k, v in r.items() if k != "etl_batch")) for r in rows(root, table)
    )
