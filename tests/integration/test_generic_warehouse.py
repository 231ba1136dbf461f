"""A warehouse from declarations alone: the sales app runs on the broker, `txstream describe
--format warehouse` writes its file, and `txstream etl run --once` (Spark, Delta) loads it,
with no code of the app in the job: the mirrors equal the engines' committed tables, and
the facts hold every committed output tuple once."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from orders.sales import reference
from orders.sales_run import SalesRun, sales_events
from tests.conftest import KafkaEnv
from tests.faults.killer import kill_leftovers
from tests.faults.scale import LONG
from txstream.config import project_root
from txstream.kafka.routing import partition_of
from txstream.model.declarations import Record

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
           "TXSTREAM_WAREHOUSE_URI": str(tmp_path / "wh"),
           "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1"}  # fmt: skip
    described = subprocess.run(
        [TXSTREAM, "describe", "--app", "orders.sales:from_params", "--format", "warehouse"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    config = tmp_path / "sales.toml"
    config.write_text(described.stdout)
    return Loaded(run.app.name, config, env, events, totals, customers, items)


@pytest.mark.timeout(600)
def test_the_etl_loads_an_app_from_its_declarations(kafka: KafkaEnv, tmp_path: Path) -> None:
    s = sales(kafka, tmp_path)
    s.etl("run", "--once", "--no-metrics")
    root = tmp_path / "wh" / s.app
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


@pytest.mark.skipif(not LONG, reason="two Spark runs (~3 min): runs in make faults")
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
