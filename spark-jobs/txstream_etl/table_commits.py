"""One query's commits to its Delta tables: each marked with its micro-batch, made once.

Spark appends a large micro-batch, delta-rs in the driver a small one, a mirror's changes and
the one-row tables (`driver_writes.py`); commits to the tables all queries share go under the
app's lock (`shared.py`). A re-run skips the tables its first run committed to, and the
versions of the query's own tables are kept for its `etl_commits` row.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from txstream import failpoints
from txstream_etl.driver_writes import append_rows, merge_changes
from txstream_etl.marks import Recent, batch_mark, version_now
from txstream_etl.shared import shared_commit
from txstream_etl.tables import QUARANTINE_TABLE, SHARED, MirrorTable, table_path


class TableCommits:
    """The table commits of one streaming query's micro-batches."""

    def __init__(self, root: str, app: str, query: str, lock: Path, driver_rows: int) -> None:
        """`lock`: the app's lock file for commits to the shared tables (`shared.py`).
        `driver_rows`: the largest fact micro-batch the driver appends itself."""
        self.root = root
        self.app = app
        self.query = query
        self.lock = lock
        self.driver_rows = driver_rows
        self.held: dict[int, set[str]] = {}  # that micro-batch: the tables that hold it already
        self.versions: dict[str, int] = {}  # own table -> its Delta version after the last batch

    def mark(self, epoch: int) -> str:
        return batch_mark(self.app, self.query, epoch)

    def resume(self, epoch: int, tables: Mapping[str, Recent], own: Sequence[str]) -> set[str]:
        """The tables that hold the run's first micro-batch, from their recent commits; the
        query's `own` tables' versions from them too."""
        mark = self.mark(epoch)
        held = {n for n, r in tables.items() if mark in r.marks}
        self.held = {epoch: held}
        self.versions = {n: tables[n].version for n in own}
        return held

    def holds(self, table: str, epoch: int) -> bool:
        """Whether the table holds this micro-batch already (a re-run's, committed before)."""
        return table in self.held.get(epoch, ())

    def append(self, rows: DataFrame, table: str, epoch: int) -> None:
        if self.holds(table, epoch):
            return
        path = table_path(self.root, table)
        shared = any(t.name == table for t in SHARED)
        jvm = rows.sparkSession.sparkContext._jvm
        with shared_commit(jvm, self.lock) if shared else contextlib.nullcontext():
            (
                rows.write.format("delta")
                .mode("append")
                .option("userMetadata", self.mark(epoch))
                .save(path)
            )
        if table in self.versions:
            self.versions[table] = version_now(rows.sparkSession, path)
        failpoints.hit("etl.after_table_commit")

    def append_fact(self, rows: DataFrame, table: str, epoch: int, size: int) -> None:
        if size > self.driver_rows:
            self.append(rows, table, epoch)
        elif not self.holds(table, epoch):
            self.append_small(rows.toArrow(), table, epoch)

    def append_quarantine(self, spark: SparkSession, rows: pa.Table, epoch: int) -> None:
        """Under the lock of Spark's commits to it: Spark's rename onto a log entry would
        overwrite one delta-rs made in between (`shared.py`)."""
        with shared_commit(spark.sparkContext._jvm, self.lock):
            self.append_small(rows, QUARANTINE_TABLE.name, epoch)

    def append_small(self, rows: pa.Table, table: str, epoch: int) -> None:
        if self.holds(table, epoch):
            return
        version = append_rows(table_path(self.root, table), rows, self.mark(epoch))
        if table in self.versions:
            self.versions[table] = version
        failpoints.hit("etl.after_table_commit")

    def merge(self, rows: DataFrame, table: MirrorTable, epoch: int) -> None:
        if self.holds(table.name, epoch):
            return
        mark = self.mark(epoch)
        path = table_path(self.root, table.name)
        changes = rows.toArrow()
        self.versions[table.name] = merge_changes(path, changes, table.key, table.dimension, mark)
        failpoints.hit("etl.after_table_commit")
