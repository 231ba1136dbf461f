"""Spark's FAIR scheduler pools: one per streaming query.

Spark's default FIFO scheduler runs every task of the oldest job first, so the changelog's
MERGEs (about sixty jobs per micro-batch) held the task slots while the streams query's few
short jobs waited behind them, and the facts' freshness was the mirrors'. In pools, the
appends of facts and raw events come first (their minimum share is every slot of a small
machine), and the MERGEs take what is left.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession

POOL = "spark.scheduler.pool"
# Pool (a query's name) -> (weight, minimum share in task slots).
SHARES = {"streams": (4, 2), "ingest": (4, 2), "changelog": (1, 0)}


def allocation_file(directory: Path) -> Path:
    """The pools' definitions, as Spark's `spark.scheduler.allocation.file` reads them."""
    pools = "".join(
        f'  <pool name="{name}"><schedulingMode>FIFO</schedulingMode>'
        f"<weight>{weight}</weight><minShare>{share}</minShare></pool>\n"
        for name, (weight, share) in SHARES.items()
    )
    path = directory / "spark-pools.xml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n')
    return path


def join_pool(spark: SparkSession, pool: str) -> None:
    """Run this thread's Spark jobs in the pool (a property of the calling thread)."""
    spark.sparkContext.setLocalProperty(POOL, pool)


def pool_threads(spark: SparkSession, workers: int) -> ThreadPoolExecutor:
    """Threads whose jobs run in the caller's pool: Python threads do not inherit it."""
    pool = spark.sparkContext.getLocalProperty(POOL)

    def enter() -> None:
        if pool is not None:
            join_pool(spark, pool)

    return ThreadPoolExecutor(max_workers=workers, initializer=enter)
