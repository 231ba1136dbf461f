"""A facts micro-batch collected into the driver: counted and typed there as Spark would,
or left to Spark where its typing is not plain (tests/integration/test_collected_typing.py
holds the two side by side)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from txstream_etl.collected import counts_of, landing, quarantined, typed_facts
from txstream_etl.decode import DECODED
from txstream_etl.offsets import Planned, parse_log_entry

# A FactTable's schema (`FactTable.schema` needs a Spark session to read its DDL).
META: list[tuple[str, DataType]] = [
    ("batch_id", LongType()), ("seq", IntegerType()), ("source_partition", IntegerType()),
    ("source_offset", LongType()), ("committed_at", TimestampType()),
    ("committed_date", DateType()), ("etl_batch", LongType()),
]  # fmt: skip


def fact(*columns: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in [*columns, *META]])


VOTES = fact(
    ("vote_id", LongType()), ("state", StringType()), ("weight", DoubleType()),
    ("ok", BooleanType()), ("n", IntegerType()),
)  # fmt: skip
TS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z


def decoded(*rows: dict[str, Any], table: str = "votes", reason: str | None = None) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"table": table, "row": json.dumps(r), "deleted": False, "batch_id": 10 + i,
             "seq": i, "topic": "t", "partition": 2, "offset": 100 + i, "kafka_ts_ms": TS,
             "reason": reason, "detail": None, "payload": None, "commit_end": False}
            for i, r in enumerate(rows)
        ],
        schema=DECODED,
    )  # fmt: skip


def test_plain_columns_are_typed_with_the_etls_own_columns() -> None:
    row = {"vote_id": 7, "state": "MA", "weight": 2, "ok": True, "n": -3, "extra": [1]}
    typed = typed_facts(decoded(row, {"vote_id": None}), VOTES, epoch=4)
    assert typed is not None
    assert typed.schema == to_arrow_schema(VOTES, timezone="UTC")
    first, second = typed.to_pylist()
    at = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert first == {
        "vote_id": 7, "state": "MA", "weight": 2.0, "ok": True, "n": -3, "batch_id": 10,
        "seq": 0, "source_partition": 2, "source_offset": 100, "committed_at": at,
        "committed_date": date(2023, 11, 14), "etl_batch": 4,
    }  # fmt: skip
    assert second["vote_id"] is None and second["source_offset"] == 101


@pytest.mark.parametrize(
    "row",
    [
        {"vote_id": 1.5},  # Spark makes a float in a BIGINT column null
        {"vote_id": True},
        {"n": 2**31},  # out of INT's range
        {"state": 5},  # Spark keeps a number's text in a STRING column
        {"ok": 1},
        {"weight": True},
        {"Vote_ID": 1},  # a column's name in another case: Spark's to match or not
    ],
)
def test_a_value_spark_would_convert_leaves_the_rows_to_spark(row: dict[str, Any]) -> None:
    assert typed_facts(decoded({"vote_id": 1}, row), VOTES, epoch=0) is None


def test_a_column_type_that_is_not_plain_leaves_the_rows_to_spark() -> None:
    stamped = fact(("vote_id", LongType()), ("cast_at", TimestampType()))
    assert typed_facts(decoded({"vote_id": 1}), stamped, epoch=0) is None


def test_counts_and_routing_match_the_spark_paths() -> None:
    batch = pa.concat_tables(
        [decoded({"vote_id": 1}, {"vote_id": 2}), decoded({"x": 1}, reason="bad_vote_id")]
    )
    assert sorted(counts_of(batch), key=lambda c: str(c["reason"])) == [
        {"table": "votes", "reason": None, "kafka_ts_ms": TS, "count": 2},
        {"table": "votes", "reason": "bad_vote_id", "kafka_ts_ms": TS, "count": 1},
    ]
    assert landing(batch, "votes").column("batch_id").to_pylist() == [10, 11]
    at = datetime(2026, 11, 27, tzinfo=UTC)
    (bad,) = quarantined(batch, 3, at).to_pylist()
    assert bad == {
        "target_table": "votes", "reason": "bad_vote_id", "detail": None,
        "payload": None, "source_topic": "t", "source_partition": 2, "source_offset": 100,
        "batch_id": 10, "committed_at": datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
        "etl_batch": 3, "quarantined_at": at,
    }  # fmt: skip


def test_an_offset_log_entry_gives_each_sources_offsets() -> None:
    entry = (
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n'
        '{"app.votes":{"1":40,"0":1200},"app.out":{"0":7}}\n-\n'
    )
    assert parse_log_entry(entry) == {"app.votes": {"1": 40, "0": 1200}, "app.out": {"0": 7}}


def test_a_planned_micro_batch_reads_each_partition_from_its_logged_start() -> None:
    """A partition the last entry lacks is new (read from its earliest); one with nothing
    new is not read; the bound counts a new partition from offset 0."""
    planned = Planned(
        {"app.votes": {"0": 1200, "1": 40}, "app.out": {"0": 7}},
        {"app.votes": {"0": 1250, "1": 40, "2": 3}, "app.out": {"0": 9}},
    )
    assert planned.ranges() == [("app.out", 0, 7, 9), ("app.votes", 0, 1200, 1250),
                                ("app.votes", 2, None, 3)]  # fmt: skip
    assert planned.records == 2 + 50 + 3
