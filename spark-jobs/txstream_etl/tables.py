"""The warehouse's Delta tables: their columns, keys, partitioning and retention.

Three kinds of table:
- facts (`FactTable`) are append-only, one row per tuple of a stream, partitioned by the day
  the source batch was committed to Kafka, so old days compact and age out whole;
- mirrors (`MirrorTable`) follow an engine table through its changelog with one MERGE per
  micro-batch; a dimension keeps removed rows, marked `is_current = false`;
- system tables: the quarantine, one row per micro-batch written (`etl_commits`, the read
  point where every table of a query agrees), and app-specific tables such as snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

# Vacuum policy: files a table no longer references are kept this long (time travel and
# readers still on an old version), and log entries for as long again as history.
TABLE_PROPERTIES = {
    "delta.deletedFileRetentionDuration": "interval 7 days",
    "delta.logRetentionDuration": "interval 30 days",
    # A checkpoint is written in the commit that reaches the interval, 2-5 s on this machine
    # against 0.3 s for a small append: at Delta's 10 it set the freshness p99 of tables
    # committed every second. A running job reads new commits incrementally either way.
    "delta.checkpointInterval": "100",
}

FACT_META = (
    "batch_id BIGINT, seq INT, source_partition INT, source_offset BIGINT, "
    "committed_at TIMESTAMP, committed_date DATE, etl_batch BIGINT"
)
# FACT_META's names: the fact columns the ETL fills itself, never from a row's data.
FACT_OWN = frozenset(column.split()[0] for column in FACT_META.split(", "))
MIRROR_META = "source_partition INT, source_offset BIGINT, committed_at TIMESTAMP, etl_batch BIGINT"
QUARANTINE = (
    "target_table STRING, reason STRING, detail STRING, payload STRING, source_topic STRING, "
    "source_partition INT, source_offset BIGINT, batch_id BIGINT, committed_at TIMESTAMP, "
    "etl_batch BIGINT, quarantined_at TIMESTAMP"
)
ETL_COMMITS = (
    "query STRING, etl_batch BIGINT, committed_at TIMESTAMP, rows BIGINT, quarantined BIGINT, "
    "first_kafka_ts TIMESTAMP, last_kafka_ts TIMESTAMP, versions MAP<STRING, BIGINT>"
)
# A decoded Kafka record (`decode.DECODED`, for Spark); changelog records past a micro-batch's
# consistent cut wait in `etl_held` in this form (`cut.py`).
DECODED_DDL = (
    "table STRING, row STRING, deleted BOOLEAN, batch_id BIGINT, seq INT, topic STRING, "
    "partition INT, offset BIGINT, kafka_ts_ms BIGINT, reason STRING, detail STRING, "
    "payload STRING, commit_end BOOLEAN"
)


def ddl(columns: str) -> StructType:
    schema = StructType.fromDDL(columns)
    if not isinstance(schema, StructType):
        raise TypeError(f"not a list of columns: {columns!r}")
    return schema


@dataclass(frozen=True)
class FactTable:
    name: str
    columns: str  # DDL of the data columns, as the cleaned rows carry them
    partition_by: tuple[str, ...] = ("committed_date",)

    @property
    def schema(self) -> StructType:
        return ddl(f"{self.columns}, {FACT_META}")


@dataclass(frozen=True)
class MirrorTable:
    name: str
    columns: str
    key: tuple[str, ...]
    dimension: bool = False  # keep deleted rows as is_current = false
    partition_by: tuple[str, ...] = ()

    @property
    def schema(self) -> StructType:
        current = ", is_current BOOLEAN" if self.dimension else ""
        return ddl(f"{self.columns}{current}, {MIRROR_META}")


@dataclass(frozen=True)
class SystemTable:
    name: str
    columns: str
    partition_by: tuple[str, ...] = ()

    @property
    def schema(self) -> StructType:
        return ddl(self.columns)


Table = FactTable | MirrorTable | SystemTable

QUARANTINE_TABLE = SystemTable("quarantine", QUARANTINE, ("target_table",))
ETL_COMMITS_TABLE = SystemTable("etl_commits", ETL_COMMITS)
SHARED = (QUARANTINE_TABLE, ETL_COMMITS_TABLE)  # written by every query of the app
HELD_TABLE = SystemTable("etl_held", DECODED_DDL)  # the changelog query's, past its cut


def arrow_schema(table: Table) -> pa.Schema:
    """The table's columns as Arrow types, for the driver's delta-rs writes."""
    return arrow_types(table.schema)


def arrow_types(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def table_path(root: str, table: str) -> str:
    return f"{root.rstrip('/')}/{table}"


def register_views(spark: SparkSession, root: str, tables: Iterable[Table]) -> None:
    """Each table as a SQL view of its own name, as it stands now, for the config's SQL."""
    for table in tables:
        spark.read.format("delta").load(table_path(root, table.name)).createOrReplaceTempView(
            table.name
        )


def ensure_table(spark: SparkSession, root: str, table: Table) -> None:
    """Create the table at its path unless it exists; an existing one is left as it is."""
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(table_path(root, table.name))
        .addColumns(table.schema)
    )
    if table.partition_by:
        builder = builder.partitionedBy(*table.partition_by)
    for key, value in TABLE_PROPERTIES.items():
        builder = builder.property(key, value)
    builder.execute()
