"""On a real Spark: facts typed in the driver (`collected.py`) are the rows Spark's
`from_json` types, so the collected path and Spark's path land the same rows; and the ETL's
Python workers are started before its queries, one per task slot."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from txstream_etl.collected import typed_facts
from txstream_etl.decode import DECODED
from txstream_etl.job import warm_python_workers
from txstream_etl.tables import FactTable, arrow_schema
from txstream_etl.writer import _fact_rows

VOTES = FactTable(
    "votes", "vote_id BIGINT, state STRING, weight DOUBLE, ok BOOLEAN, n INT, note STRING"
)
ROWS: list[dict[str, Any]] = [
    {"vote_id": 1, "state": "MA", "weight": 0.1, "ok": True, "n": 2**31 - 1, "note": "é ☃"},
    {"vote_id": -(2**63), "state": None, "weight": 3, "ok": False, "n": -(2**31)},
    {"vote_id": 2**63 - 1, "weight": 1e308, "extra": {"x": [1]}, "note": ""},
    {"weight": float("inf")},
    {},
]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # as the ETL's session sets it
    session = (
        SparkSession.builder.master("local[2]")
        .appName("txstream-test-collected-typing")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    gateway = SparkContext._gateway
    try:
        yield session
    finally:
        session.stop()
        if gateway is not None:  # the JVM pyspark started for this test: stopped by pid
            gateway.shutdown()
            gateway.proc.kill()
            gateway.proc.wait(timeout=60)
        SparkContext._gateway = None
        SparkContext._jvm = None


def decoded(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"table": "votes", "row": json.dumps(r), "deleted": False, "batch_id": 5 + i,
             "seq": i, "topic": "t", "partition": 1, "offset": 40 + i,
             "kafka_ts_ms": 1_764_000_000_999 + i, "reason": None, "detail": None,
             "payload": None, "commit_end": False}
            for i, r in enumerate(rows)
        ],
        schema=DECODED,
    )  # fmt: skip


def test_the_driver_types_plain_facts_as_spark_does(spark: SparkSession) -> None:
    rows = decoded(ROWS)
    by_spark = _fact_rows(spark.createDataFrame(rows), VOTES, 9).toArrow()
    by_driver = typed_facts(rows, VOTES.schema, 9)
    assert by_driver is not None
    assert by_driver.schema == arrow_schema(VOTES)
    assert by_driver.to_pylist() == by_spark.to_pylist()
    assert math.isinf(by_driver.column("weight")[3].as_py())


@pytest.mark.parametrize(
    ("value", "column"), [(1.5, "vote_id"), ("5", "vote_id"), (5, "state"), (1, "ok")]
)
def test_values_spark_converts_are_left_to_spark(
    spark: SparkSession, value: object, column: str
) -> None:
    """Spark does something of its own with each (a null, a number's text): the driver
    declines rather than guess it."""
    rows = decoded([{"vote_id": 1, column: value}])
    (by_spark,) = _fact_rows(spark.createDataFrame(rows), VOTES, 9).toArrow().to_pylist()
    assert by_spark[column] != value or type(by_spark[column]) is not type(value)
    assert typed_facts(rows, VOTES.schema, 9) is None


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid:
            out.append(int(stat.parent.name))
    return out


def python_workers(jvm: int) -> list[int]:
    """The Python workers Spark's daemon forked for this JVM (its children's children)."""
    return [w for daemon in children(jvm) for w in children(daemon)]


def test_a_python_worker_per_task_slot_is_started_before_the_queries(
    spark: SparkSession,
) -> None:
    """Started mid-stream, a worker imports txstream inside a micro-batch's task (5 s on
    two busy cores, all of it in the facts' freshness)."""
    gateway = SparkContext._gateway
    assert gateway is not None
    before = python_workers(gateway.proc.pid)
    warm_python_workers(spark)
    started = set(python_workers(gateway.proc.pid)) - set(before)
    assert len(started) == spark.sparkContext.defaultParallelism == 2
