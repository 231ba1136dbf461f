"""A facts micro-batch collected into the driver whole: its counts, and its rows typed there.

A small micro-batch of the streams query is collected once: the Kafka read and the decode
are its one Spark job, and delta-rs appends it. Counting it and typing it in Spark took two
jobs more, their planning, and a wait for task slots beside the changelog's jobs: about half
of a micro-batch on two cores.

Typing here must give what Spark's `from_json` gives (`spark_rows.fact_rows`), so it takes only
columns whose typing is plain (booleans, integers, doubles, strings), and only values Spark
reads as they are. Any other column type, or any value Spark would convert, or a key that
differs from a column only in case, leaves the table's rows of that micro-batch to Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

from txstream_etl.tables import FACT_OWN, arrow_types

Count = dict[str, Any]  # table, reason, kafka_ts_ms, count: as Spark's groupBy().count() rows


def _integer(bits: int) -> Callable[[Any], bool]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1)
    return lambda v: type(v) is int and low <= v < high


# Per column type, the JSON values Spark's parser takes as they are (null aside). A float
# for an integer column, a number for a string one (Spark keeps its text), a bool for a
# double: each is Spark's to decide.
PLAIN: dict[type[DataType], Callable[[Any], bool]] = {
    BooleanType: lambda v: type(v) is bool,
    IntegerType: _integer(32),
    LongType: _integer(64),
    DoubleType: lambda v: type(v) is float or (type(v) is int and abs(v) < 2**63),
    StringType: lambda v: type(v) is str,
}


def counts_of(decoded: pa.Table) -> list[Count]:
    """Rows per (table, reason, commit time), as the Spark path counts them."""
    grouped = decoded.group_by(["table", "reason", "kafka_ts_ms"], use_threads=False)
    return [
        {"table": g["table"], "reason": g["reason"], "kafka_ts_ms": g["kafka_ts_ms"],
         "count": g["count_all"]}
        for g in grouped.aggregate([([], "count_all")]).to_pylist()
    ]  # fmt: skip


def landing(decoded: pa.Table, table: str) -> pa.Table:
    """The decoded rows that land in `table` (not quarantined)."""
    return decoded.filter(pc.and_(pc.equal(decoded["table"], table), pc.is_null(decoded["reason"])))


def quarantined(decoded: pa.Table, epoch: int, at: datetime) -> pa.Table:
    """The rejected rows as the quarantine table's (`spark_rows.quarantine_rows`' columns)."""
    bad = decoded.filter(pc.is_valid(decoded["reason"]))
    return pa.table({
        "target_table": bad["table"],
        "reason": bad["reason"],
        "detail": bad["detail"],
        "payload": bad["payload"],
        "source_topic": bad["topic"],
        "source_partition": bad["partition"],
        "source_offset": bad["offset"],
        "batch_id": bad["batch_id"],
        "committed_at": _timestamps(bad["kafka_ts_ms"]),
        "etl_batch": pa.array([epoch] * bad.num_rows, pa.int64()),
        "quarantined_at": pa.array([at] * bad.num_rows, pa.timestamp("us", tz="UTC")),
    })  # fmt: skip


def _timestamps(ms: pa.ChunkedArray) -> pa.ChunkedArray:
    return ms.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))


def typed_facts(rows: pa.Table, spark_schema: StructType, epoch: int) -> pa.Table | None:
    """`rows` (decoded, of one fact table) as that table's Arrow rows (`spark_schema`: its
    `FactTable.schema`); None: Spark's to type."""
    data = [f for f in spark_schema.fields if f.name not in FACT_OWN]
    if any(type(f.dataType) not in PLAIN for f in data):
        return None
    checks = [(f.name, PLAIN[type(f.dataType)]) for f in data]
    names = {f.name for f in data}
    folded = {name.lower() for name in spark_schema.fieldNames()}
    values: dict[str, list[Any]] = {name: [] for name in names}
    for text in rows.column("row").to_pylist():
        row = json.loads(text)
        if not isinstance(row, dict):
            return None
        if any(key not in names and key.lower() in folded for key in row):
            return None
        for name, check in checks:
            value = row.get(name)
            if value is not None and not check(value):
                return None
            values[name].append(value)
    schema = arrow_types(spark_schema)
    committed = _timestamps(rows.column("kafka_ts_ms"))
    meta = {
        "batch_id": rows.column("batch_id"),
        "seq": rows.column("seq"),
        "source_partition": rows.column("partition"),
        "source_offset": rows.column("offset"),
        "committed_at": committed,
        "committed_date": committed.cast(pa.date32()),
        "etl_batch": pa.array([epoch] * rows.num_rows, pa.int64()),
    }
    columns = {name: pa.array(v, schema.field(name).type) for name, v in values.items()} | meta
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)
