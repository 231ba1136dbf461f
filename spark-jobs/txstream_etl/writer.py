"""One micro-batch of decoded rows into Delta: each table once, exactly once.

Kafka's read_committed end offsets fall between transactions, so a micro-batch holds whole
atomic batches (and whole group commits of the changelog). Each table gets one Delta commit
per micro-batch, an append or a MERGE (the small ones by delta-rs: `driver_writes.py`), so a
batch lands in a table whole or not at all; each commit carries the micro-batch's mark
(`table_commits.py`). Spark writes its offsets before running a batch and its commit after,
so a job killed in between re-runs the same batch with the same id on restart, and only
then: the first micro-batch of a run looks each table's recent commits up for its mark, and
skips the tables that hold it. No table ever holds a batch twice or misses one.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from txstream import failpoints
from txstream_etl.batch_stats import BatchStats, commit_row, landed_tables, per_table
from txstream_etl.collected import Count, counts_of, landing, quarantined, typed_facts
from txstream_etl.config import COLLECT_RECORDS, DRIVER_ROWS
from txstream_etl.direct import DirectReader
from txstream_etl.held import HeldRows
from txstream_etl.marks import recent
from txstream_etl.offsets import Planned, planned
from txstream_etl.pools import join_pool, pool_threads
from txstream_etl.spark_rows import fact_rows, mirror_rows, quarantine_rows
from txstream_etl.table_commits import TableCommits
from txstream_etl.tables import (
    ETL_COMMITS_TABLE,
    HELD_TABLE,
    QUARANTINE_TABLE,
    SHARED,
    FactTable,
    MirrorTable,
    arrow_schema,
    table_path,
)

log = logging.getLogger("txstream.etl")


@dataclass(frozen=True)
class AfterBatch:
    """A table written after the query's own, from them (a snapshot): its rows per batch."""

    table: str
    rows: Callable[[int], pa.Table]


class MicroBatchWriter:
    """The `foreachBatch` function of one streaming query."""

    def __init__(
        self,
        root: str,
        app: str,
        query: str,
        tables: Mapping[str, FactTable | MirrorTable],
        lock: Path,
        after: AfterBatch | None = None,
        consistent: bool = False,
        driver_rows: int = DRIVER_ROWS,
        checkpoint: str | None = None,
        collect_records: int = COLLECT_RECORDS,
        direct: DirectReader | None = None,
    ) -> None:
        """`lock`: the app's lock file for commits to the shared tables (`shared.py`).
        `consistent`: the query reads a changelog, and ends each micro-batch at a
        consistent cut (`cut.py`), keeping what lies past it in `etl_held`.
        `driver_rows`: the largest fact micro-batch the driver appends itself.
        `checkpoint`: the query's, whose offset log tells a micro-batch's size before it is
        read; with it, a facts micro-batch of up to `collect_records` Kafka records (and
        `driver_rows`) is collected whole into the driver (`collected.py`).
        `direct`: reads such a micro-batch from Kafka in the driver, without a Spark job."""
        self.checkpoint = checkpoint
        self.collect_records = min(collect_records, driver_rows)
        self.direct = direct
        self.root = root
        self.waiting = HeldRows(root, query) if consistent else None
        self.query = query
        self.tables = dict(tables)
        self.after = after
        self.delta = TableCommits(root, app, query, lock, driver_rows)
        self.stats = BatchStats()
        self.resumed = False  # whether this run's first micro-batch was looked up

    def __call__(self, df: DataFrame, epoch: int) -> None:
        spark = df.sparkSession
        join_pool(spark, self.query)
        if not self.resumed:
            self._resume(spark, epoch)
        small = self._collects(spark, epoch)
        if small is not None:
            decoded = self.direct.read(small) if self.direct is not None else None
            if decoded is not None:
                self._land_collected(spark, decoded, epoch, "read by the driver")
            else:
                self._land_collected(spark, df.toArrow(), epoch, "collected")
            return
        df = df.persist()
        try:
            land, held = self.waiting.cut(spark, df) if self.waiting is not None else (df, None)
            tally = land.groupBy("table", "reason", "kafka_ts_ms").count()
            counts = [r.asDict() for r in tally.collect()]
            if counts:
                self._write(spark, land, epoch, counts, held)
            elif held is not None:
                self._hold(held, epoch)
        finally:
            df.unpersist()

    def _collects(self, spark: SparkSession, epoch: int) -> Planned | None:
        """The micro-batch's offsets, if it is facts only and small enough to collect whole."""
        if self.waiting is not None or self.checkpoint is None or self.collect_records < 1:
            return None
        if not all(isinstance(t, FactTable) for t in self.tables.values()):
            return None
        offsets = planned(spark, self.checkpoint, epoch)
        return offsets if offsets is not None and offsets.records <= self.collect_records else None

    def _land_collected(self, spark: SparkSession, decoded: pa.Table, epoch: int, how: str) -> None:
        started = time.monotonic()
        counts = counts_of(decoded)
        commits: list[Callable[[], None]] = []
        for name in sorted(landed_tables(counts) & self.tables.keys()):
            table = self.tables[name]
            assert isinstance(table, FactTable)  # _collects holds facts only
            commits.append(functools.partial(
                self._append_collected, spark, landing(decoded, name), table, epoch
            ))  # fmt: skip
        bad = quarantined(decoded, epoch, datetime.now(UTC))
        if bad.num_rows:
            rows = bad.cast(arrow_schema(QUARANTINE_TABLE))
            append = functools.partial(self.delta.append_quarantine, spark, rows, epoch)
            commits.append(append)
        if counts:
            self._commit(spark, epoch, counts, commits, started, how)

    def _append_collected(
        self, spark: SparkSession, rows: pa.Table, table: FactTable, epoch: int
    ) -> None:
        typed = typed_facts(rows, table.schema, epoch)
        if typed is not None:
            self.delta.append_small(typed, table.name, epoch)
        else:
            typed_by_spark = fact_rows(spark.createDataFrame(rows), table, epoch)
            self.delta.append_fact(typed_by_spark, table.name, epoch, rows.num_rows)

    def _hold(self, held: DataFrame, epoch: int) -> None:
        """Replace what waits in etl_held; a re-run that wrote it already leaves it."""
        assert self.waiting is not None  # only a consistent query holds rows back
        if self.delta.holds(HELD_TABLE.name, epoch):
            self.waiting.kept()
            return
        self.waiting.replace(held, self.delta.mark(epoch))
        failpoints.hit("etl.after_table_commit")

    def _own(self) -> list[str]:
        """The tables only this query writes: their versions make its epochs."""
        return [*self.tables, *([self.after.table] if self.after is not None else [])]

    def _resume(self, spark: SparkSession, epoch: int) -> None:
        """Which tables hold the run's first micro-batch: Spark re-runs one it never marked
        done, and a kill may have come after some of its table commits."""
        self.resumed = True
        tables = {n: recent(spark, table_path(self.root, n)) for n in self._own()}
        tables |= {t.name: recent(spark, table_path(self.root, t.name)) for t in SHARED}
        if self.waiting is not None:
            waiting = recent(spark, self.waiting.path)
            tables[HELD_TABLE.name] = waiting
            self.waiting.resume(waiting, self.delta.mark(epoch))
        held = self.delta.resume(epoch, tables, self._own())
        if held:
            log.warning(
                "%s micro-batch %d is a re-run: %s hold it already",
                self.query, epoch, ", ".join(sorted(held)),
            )  # fmt: skip

    def _write(
        self,
        spark: SparkSession,
        df: DataFrame,
        epoch: int,
        counts: list[Count],
        held: DataFrame | None = None,
    ) -> None:
        started = time.monotonic()
        commits: list[Callable[[], None]] = []
        sizes = per_table(counts)
        for name in sorted(landed_tables(counts) & self.tables.keys()):
            rows = df.where((F.col("table") == name) & F.col("reason").isNull())
            table = self.tables[name]
            if isinstance(table, FactTable):
                typed = fact_rows(rows, table, epoch)
                commits.append(functools.partial(
                    self.delta.append_fact, typed, name, epoch, sizes[name]
                ))  # fmt: skip
            else:
                commits.append(functools.partial(
                    self.delta.merge, mirror_rows(rows, table, epoch), table, epoch
                ))  # fmt: skip
        if any(c["reason"] is not None for c in counts):
            bad = quarantine_rows(df.where(F.col("reason").isNotNull()), epoch)
            append = functools.partial(self.delta.append, bad, QUARANTINE_TABLE.name, epoch)
            commits.append(append)
        self._commit(spark, epoch, counts, commits, started, "", held)

    def _commit(
        self,
        spark: SparkSession,
        epoch: int,
        counts: Sequence[Count],
        commits: list[Callable[[], None]],
        started: float,
        how: str,
        held: DataFrame | None = None,
    ) -> None:
        """Make the micro-batch's table commits, then record it in `etl_commits`."""
        # The tables are independent Delta logs: commit them side by side, since each commit
        # is mostly Spark's fixed per-job latency. All must succeed before the batch counts.
        with pool_threads(spark, len(commits) or 1) as pool:
            for future in [pool.submit(commit) for commit in commits]:
                future.result()
        if held is not None:
            self._hold(held, epoch)
        if self.after is not None and landed_tables(counts):
            self.delta.append_small(self.after.rows(epoch), self.after.table, epoch)
        done = time.time()
        row = commit_row(self.query, counts, epoch, done, self.delta.versions)
        self.delta.append_small(row, ETL_COMMITS_TABLE.name, epoch)
        self.stats.observe(counts, done)
        log.info(
            "%s micro-batch %d: %s in %.1fs%s",
            self.query,
            epoch,
            ", ".join(f"{t} {n}" for t, n in sorted(per_table(counts).items())),
            time.monotonic() - started,
            f", {how}" if how else "",
        )
