"""The periodic batch job: aggregates, compaction and the vacuum policy.

Streaming commits small files (one set per micro-batch); OPTIMIZE rewrites them into few
large ones without changing any row, in its own Delta commit. VACUUM then deletes the files
that no version within the table's `delta.deletedFileRetentionDuration` references: the
vacuum policy is that table property (7 days, set by `tables.py` when a table is created;
Delta 4 ignores a retention passed to VACUUM), so readers and time travel on recent versions
keep working. The aggregate is rebuilt whole, in one overwrite commit, so re-running the job
is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from txstream_etl.leaderboard_warehouse import ALL_TABLES, VOTES
from txstream_etl.tables import SystemTable, ensure_table, table_path

DAILY_VOTES = SystemTable(
    "daily_votes",
    "committed_date DATE, state STRING, contestant_number BIGINT, votes BIGINT",
    ("committed_date",),
)


@dataclass(frozen=True)
class MaintenanceReport:
    compacted: dict[str, int]  # table -> files removed by OPTIMIZE
    vacuumed: list[str]
    daily_rows: int


def aggregate(spark: SparkSession, root: str) -> int:
    """Accepted votes per day, state and contestant, from the votes fact."""
    ensure_table(spark, root, DAILY_VOTES)
    daily = (
        spark.read.format("delta")
        .load(table_path(root, VOTES.name))
        .groupBy("committed_date", "state", "contestant_number")
        .agg(F.count("*").alias("votes"))
    )
    daily.write.format("delta").mode("overwrite").save(table_path(root, DAILY_VOTES.name))
    return int(daily.count())


def maintain(spark: SparkSession, root: str) -> MaintenanceReport:
    daily_rows = aggregate(spark, root)
    compacted: dict[str, int] = {}
    vacuumed: list[str] = []
    for table in (*ALL_TABLES, DAILY_VOTES):
        path = table_path(root, table.name)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        delta = DeltaTable.forPath(spark, path)
        metrics = delta.optimize().executeCompaction().collect()[0]["metrics"]
        compacted[table.name] = int(metrics["numFilesRemoved"])
        delta.vacuum()
        vacuumed.append(table.name)
    return MaintenanceReport(compacted, vacuumed, daily_rows)
