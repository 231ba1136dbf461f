"""The periodic batch job: aggregates, compaction and the vacuum policy.

Streaming commits small files (one set per micro-batch); OPTIMIZE rewrites them into few
large ones without changing any row, in its own Delta commit. VACUUM then deletes the files
that no version within the table's `delta.deletedFileRetentionDuration` references: the
vacuum policy is that table property (7 days, set by `tables.py` when a table is created;
Delta 4 ignores a retention passed to VACUUM), so readers and time travel on recent versions
keep working. Aggregates (the config's SQL) are rebuilt whole, in one overwrite commit, so
re-running the job is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from delta import exceptions as delta_errors
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from txstream_etl.config import WarehouseConfig, tables
from txstream_etl.conflicts import retried
from txstream_etl.tables import (
    ETL_COMMITS_TABLE,
    HELD_TABLE,
    QUARANTINE_TABLE,
    ensure_table,
    register_views,
    table_path,
)

# Delta's refusals of a commit whose files a concurrent commit changed (each its own class)
CONFLICTS = (
    delta_errors.ConcurrentAppendException,
    delta_errors.ConcurrentDeleteDeleteException,
    delta_errors.ConcurrentDeleteReadException,
    delta_errors.ConcurrentTransactionException,
    delta_errors.ConcurrentWriteException,
    delta_errors.DeltaConcurrentModificationException,
)


@dataclass(frozen=True)
class MaintenanceReport:
    compacted: dict[str, int]  # table -> files removed by OPTIMIZE
    vacuumed: list[str]
    aggregated: dict[str, int]  # aggregate table -> rows


def aggregate(spark: SparkSession, root: str, config: WarehouseConfig) -> dict[str, int]:
    """Rebuild each aggregate from its SQL over the warehouse tables."""
    # The raw table exists only if a run had a raw topic.
    present = [
        t for t in tables(config) if DeltaTable.isDeltaTable(spark, table_path(root, t.name))
    ]
    register_views(spark, root, present)
    rows: dict[str, int] = {}
    for agg in config.aggregates:
        ensure_table(spark, root, agg.table)
        result = spark.sql(agg.sql)
        result.write.format("delta").mode("overwrite").save(table_path(root, agg.table.name))
        rows[agg.table.name] = int(result.count())
    return rows


def compact(delta: DeltaTable, name: str) -> int:
    """OPTIMIZE the table; return the files it removed. A running ETL's commit that rewrote
    files being compacted refuses the compaction, which is then made again (`conflicts.py`)."""

    def optimize() -> int:
        metrics = delta.optimize().executeCompaction().collect()[0]["metrics"]
        return int(metrics["numFilesRemoved"])

    return retried(optimize, CONFLICTS, f"the compaction of {name}")


def maintain(spark: SparkSession, root: str, config: WarehouseConfig) -> MaintenanceReport:
    aggregated = aggregate(spark, root, config)
    compacted: dict[str, int] = {}
    vacuumed: list[str] = []
    # etl_held is overwritten by every changelog micro-batch that holds records back, so
    # under 2PC load its unreferenced files pile up fastest of all.
    system = (QUARANTINE_TABLE, ETL_COMMITS_TABLE, HELD_TABLE)
    for table in (*tables(config), *system, *(a.table for a in config.aggregates)):
        path = table_path(root, table.name)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        delta = DeltaTable.forPath(spark, path)
        compacted[table.name] = compact(delta, table.name)
        delta.vacuum()
        vacuumed.append(table.name)
    return MaintenanceReport(compacted, vacuumed, aggregated)
