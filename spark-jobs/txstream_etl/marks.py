"""The mark each Delta commit of a micro-batch carries, and reading tables' marks back.

Every commit names its micro-batch in Delta's `userMetadata` (query and micro-batch id), so
a re-run finds the tables its first run committed to in their recent history. Delta's own
idempotent-write options (`txnAppId`) would do the same, but look the table's transactions
up on every commit, which rebuilds its state: about half a second per table per micro-batch
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

# Commits of one table since a query's interrupted micro-batch: the other queries' (two at
# most) and its own, a few per micro-batch each. Looked at once per run.
HISTORY_DEPTH = 100


def batch_mark(app: str, query: str, epoch: int) -> str:
    """The `userMetadata` of every commit of one micro-batch of one query."""
    return f"txstream-etl:{app}:{query}:{epoch}"


@dataclass(frozen=True)
class Recent:
    """A table's newest version, and the marks of its recent commits (mark -> version)."""

    version: int
    marks: dict[str, int]


def recent(spark: SparkSession, path: str) -> Recent:
    history = DeltaTable.forPath(spark, path).history(HISTORY_DEPTH)
    commits = history.select("version", "userMetadata").collect()
    return Recent(
        max(r["version"] for r in commits), {r["userMetadata"]: r["version"] for r in commits}
    )


def version_now(spark: SparkSession, path: str) -> int:
    """The version this driver's Delta log holds for the table: the one its last commit made
    (read in memory, without listing or a job, unlike `history`)."""
    jvm: Any = spark.sparkContext._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return int(delta_log.unsafeVolatileSnapshot().version())
