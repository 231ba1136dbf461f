"""TPC-C on both systems of `bench/tpcc_bench.py`, small: 2 warehouses on 2 partitions, a
few hundred transactions of the specification's mix (New-Orders with remote lines and
Payments by remote customers among them, so 2PC runs). Both meet TPC-C's consistency
conditions afterwards, roll back the same New-Orders (unused items) and commit the same
number of each transaction; and a consistency check can fail: a district's year-to-date
changed behind the warehouse's back is found (PostgreSQL here; txstream's checks in
`tests/unit/apps/test_tpcc.py`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bench import tpcc_pg
from bench.leaderboard_peers.postgres import private_cluster
from bench.tpcc_bench import pg_run, plan, txstream_load, txstream_run, txstream_violations
from tests.support.kafka_env import KafkaEnv
from tests.support.sequencer_driver import unique
from tests.support.service_process import ServiceProcess
from txstream.client import TxClient
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics, ensure_topics

pytestmark = pytest.mark.kafka

WAREHOUSES, ITEMS, CUSTOMERS, TXNS = 2, 200, 20, 300


@pytest.fixture
def tpcc(kafka: KafkaEnv, tmp_path: Path) -> Iterator[TxClient]:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    name = unique("tpcc").replace("-", "_")
    ensure_topics(TopicAdmin(settings), AppTopics(name), [], 2, oltp=True)
    app = ["--app", "tpcc.dataflow:from_params", "--params", json.dumps({"name": name})]
    procs = [ServiceProcess(settings, ["coordinator", "run", "--http-port", "0",
                                       "--metrics-port", "0", *app], tmp_path / "c.log"),
             ServiceProcess(settings, ["worker", "run", "--metrics-port", "0", *app],
                            tmp_path / "w.log")]  # fmt: skip
    try:
        with TxClient(name, settings, timeout_s=60) as client:
            yield client  # loading waits up to 120 s a call: the worker comes up meanwhile
    finally:
        for p in procs:
            p.terminate()


def test_both_systems_meet_the_consistency_conditions(tpcc: TxClient) -> None:
    txns = plan(WAREHOUSES, ITEMS, CUSTOMERS, TXNS, seed=1)  # 2 New-Orders roll back
    assert any(k == "payment" and p["cw"] != p["w"] for k, p in txns)
    assert any(k == "new_order" and any(x["supply_w"] != p["w"] for x in p["lines"])
               for k, p in txns)  # fmt: skip
    txstream_load(tpcc, WAREHOUSES, ITEMS, CUSTOMERS)
    ours = txstream_run(tpcc, txns, in_flight=16)
    assert not ours.failed and txstream_violations(tpcc, WAREHOUSES) == []
    with private_cluster() as cluster:
        tpcc_pg.load(cluster.dsn, WAREHOUSES, ITEMS, CUSTOMERS)
        theirs = pg_run(cluster.dsn, txns, clients=4)
        assert not theirs.failed and tpcc_pg.violations(cluster.dsn) == []
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("UPDATE district SET ytd = ytd + 1 WHERE w_id = 1 AND d_id = 1")
        assert tpcc_pg.violations(cluster.dsn) == ["W_YTD = sum(D_YTD)"]
    assert ours.rolled_back == theirs.rolled_back > 0
    committed = {k: len(v) for k, v in ours.latencies_ms.items()}
    assert committed == {k: len(v) for k, v in theirs.latencies_ms.items()}
    assert committed["new_order"] + ours.rolled_back == sum(k == "new_order" for k, _ in txns)
