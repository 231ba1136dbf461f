"""On a real Spark and broker, a small facts micro-batch handled in the driver is what
Spark's own path gives: its records read from Kafka there (`direct.py`) are those of Spark's
Kafka source, and its facts typed there (`collected.py`) are the rows Spark's `from_json`
types. And the ETL's Python workers are started before its queries, one per task slot."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark import SparkContext
from pyspark.sql import SparkSession

from tests.support.kafka_env import KafkaEnv
from txstream.commit.markers import COMMIT_END_HEADER
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import send, transactional_producer_config
from txstream.schemas.codec import WRITER_HEADER
from txstream_etl.collected import typed_facts
from txstream_etl.decode import DECODED, KafkaRecord, decode_arrow
from txstream_etl.direct import DirectReader
from txstream_etl.job import kafka_columns, kafka_options, warm_python_workers
from txstream_etl.offsets import Planned
from txstream_etl.plan import Plan, RawSource
from txstream_etl.session import spark_session
from txstream_etl.spark_rows import fact_rows
from txstream_etl.tables import FactTable, arrow_schema

pytestmark = pytest.mark.spark

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
def spark(kafka: KafkaEnv) -> Iterator[SparkSession]:
    session = spark_session(kafka.settings.model_copy(update={"spark_master": "local[2]"}),
                            "txstream-test-collected")  # fmt: skip
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
    by_spark = fact_rows(spark.createDataFrame(rows), VOTES, 9).toArrow()
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
    (by_spark,) = fact_rows(spark.createDataFrame(rows), VOTES, 9).toArrow().to_pylist()
    assert by_spark[column] != value or type(by_spark[column]) is not type(value)
    assert typed_facts(rows, VOTES.schema, 9) is None


def produce(kafka: KafkaEnv, topic: str, txns: list[tuple[bool, list[tuple[int, bytes]]]]) -> None:
    """Transactions of (partition, value) records, each committed or aborted; the first
    record of each carries the ETL's headers (one with text that is not ASCII)."""
    producer = Producer(transactional_producer_config(kafka.settings, f"{topic}-producer"))
    producer.init_transactions(30)
    for n, (commit, records) in enumerate(txns):
        producer.begin_transaction()
        for i, (partition, value) in enumerate(records):
            headers = (
                [(WRITER_HEADER, b"fp-%d" % n), (COMMIT_END_HEADER, '["é"]'.encode())]
                if not i
                else []
            )
            send(producer, topic, value, partition=partition, key=b"k%d" % i, headers=headers)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)  # in the log before the abort, which would drop them unsent
            producer.abort_transaction(30)


def high_watermarks(kafka: KafkaEnv, topic: str) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "unused"})
    try:
        return {str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in (0, 1)}  # fmt: skip
    finally:
        consumer.close()


def vote(n: int) -> bytes:
    return json.dumps({"voteId": n, "phone": 6175550000 + n, "contestant": n % 5 + 1,
                       "castAtMs": 1_764_000_000_000 + n}).encode()  # fmt: skip


def by_spark(spark: SparkSession, kafka: KafkaEnv, topic: str, planned: Planned) -> pa.Table:
    """What Spark's Kafka source reads of the planned ranges, as its query selects it."""
    earliest = -2  # Spark's offset JSON's
    first = {t: {p: planned.start.get(t, {}).get(p, earliest) for p in ps}
             for t, ps in planned.end.items()}  # fmt: skip
    read = (
        spark.read.format("kafka")
        .options(**kafka_options(kafka.settings))
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(first))
        .option("endingOffsets", json.dumps(planned.end))
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        .load()
    )
    return (
        kafka_columns(read).toArrow().sort_by([("partition", "ascending"), ("offset", "ascending")])
    )


def test_the_driver_reads_a_micro_batch_as_sparks_kafka_source_does(
    spark: SparkSession, kafka: KafkaEnv
) -> None:
    """Committed transactions around an aborted one, on two partitions, with records after
    the planned end; from a logged start and from the earliest (a new partition)."""
    topic = f"direct-{uuid.uuid4().hex[:8]}"
    TopicAdmin(kafka.settings).create_topic(topic, partitions=2)
    produce(kafka, topic, [
        (True, [(0, vote(1)), (1, vote(2)), (0, vote(3))]),
        (False, [(0, vote(4)), (1, vote(5))]),
        (True, [(1, vote(6)), (0, b"not a vote"), (0, vote(7))]),
    ])  # fmt: skip
    ends = high_watermarks(kafka, topic)  # the third transaction's end, its markers too
    produce(kafka, topic, [(True, [(0, vote(8)), (1, vote(9))])])  # past the planned end
    plan = Plan("unused", {topic: RawSource("votes")})
    reader = DirectReader(kafka.settings, plan)
    try:
        # partition 0 after the first transaction; then partition 0 new, from its earliest
        for planned, read in (
            (Planned({topic: {"0": 3, "1": 0}}, {topic: ends}), [(0, 5), (0, 6), (1, 0), (1, 4)]),
            (Planned({topic: {"1": 2}}, {topic: ends}), [(0, 0), (0, 1), (0, 5), (0, 6), (1, 4)]),
        ):
            spark_read = by_spark(spark, kafka, topic, planned)
            records = reader.records(planned)
            assert records is not None
            assert [(r.partition, r.offset) for r in records] == read
            # a record without headers has a null `commit_end`, false to `decode_arrow`
            spark_records = [
                replace(KafkaRecord(*r.values()), commit_end=bool(r["commit_end"]))
                for r in spark_read.to_pylist()
            ]
            assert spark_records == records
            decoded = reader.read(planned)
            assert decoded is not None
            spark_decoded = pa.Table.from_batches(decode_arrow(plan, spark_read.to_batches()))
            assert decoded.to_pylist() == spark_decoded.to_pylist()
    finally:
        reader.close()


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
