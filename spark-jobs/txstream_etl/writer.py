"""One micro-batch of decoded rows into Delta: each table once, exactly once.

Kafka's read_committed end offsets fall between transactions, so a micro-batch holds whole
atomic batches (and whole group commits of the changelog). Each table gets one Delta commit
per micro-batch, an append or a MERGE (the small ones by delta-rs: `driver_writes.py`), so a
batch lands in a table whole or not at all.

Every commit names its micro-batch in Delta's `userMetadata` (query and micro-batch id).
Spark writes its offsets before running a batch and its commit after, so a job killed in
between re-runs the same batch with the same id on restart, and only then: the first
micro-batch of a run looks each table's recent commits up for its mark, and skips the tables
that hold it. No table ever holds a batch twice or misses one. Delta's own idempotent-write
options (`txnAppId`) would do the same, but look the table's transactions up on every
commit, which rebuilds its state: about half a second per table per micro-batch here.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections import Counter as Tally
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from txstream import failpoints
from txstream_etl.collected import Count, counts_of, landing, quarantined, typed_facts
from txstream_etl.config import COLLECT_RECORDS, DRIVER_ROWS
from txstream_etl.cut import MARKS, PREPARED, SPAN, Marker, consistent_cut
from txstream_etl.direct import DirectReader
from txstream_etl.driver_writes import append_rows, merge_changes
from txstream_etl.metrics import FRESHNESS, QUARANTINED, ROWS
from txstream_etl.offsets import Planned, planned
from txstream_etl.pools import join_pool, pool_threads
from txstream_etl.shared import shared_commit
from txstream_etl.tables import (
    ETL_COMMITS_TABLE,
    FACT_OWN,
    HELD_TABLE,
    QUARANTINE_TABLE,
    SHARED,
    FactTable,
    MirrorTable,
    arrow_schema,
    table_path,
)

log = logging.getLogger("txstream.etl")
# Commits of one table since a query's interrupted micro-batch: the other queries' (two at
# most) and its own, a few per micro-batch each. Looked at once per run.
HISTORY_DEPTH = 100


@dataclass(frozen=True)
class AfterBatch:
    """A table written after the query's own, from them (a snapshot): its rows per batch."""

    table: str
    rows: Callable[[int], pa.Table]


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


@dataclass
class BatchStats:
    """What the query landed so far, for the run's closing summary."""

    rows: Tally[str] = field(default_factory=Tally)
    quarantined: Tally[tuple[str, str]] = field(default_factory=Tally)
    freshness_s: list[float] = field(default_factory=list)


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
        self.driver_rows = driver_rows
        self.checkpoint = checkpoint
        self.collect_records = min(collect_records, driver_rows)
        self.direct = direct
        self.root = root
        self.lock = lock
        self.consistent = consistent
        self.holding = consistent  # whether records wait in etl_held (read once to know)
        self.held_version = -1  # the etl_held version the next micro-batch reads
        self.rerun_held_version: int | None = None  # etl_held's after the re-run, if written
        self.app = app
        self.query = query
        self.tables = dict(tables)
        self.after = after
        self.stats = BatchStats()
        self.resumed = False  # whether this run's first micro-batch was looked up
        self.held: dict[int, set[str]] = {}  # that micro-batch: the tables that hold it already
        self.versions: dict[str, int] = {}  # own table -> its Delta version after the last batch

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
            land, held = self._cut(spark, df) if self.consistent else (df, None)
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
        if self.consistent or self.checkpoint is None or self.collect_records < 1:
            return None
        if not all(isinstance(t, FactTable) for t in self.tables.values()):
            return None
        offsets = planned(spark, self.checkpoint, epoch)
        return offsets if offsets is not None and offsets.records <= self.collect_records else None

    def _land_collected(self, spark: SparkSession, decoded: pa.Table, epoch: int, how: str) -> None:
        started = time.monotonic()
        counts = counts_of(decoded)
        commits: list[Callable[[], None]] = []
        for name in sorted(_landed(counts) & self.tables.keys()):
            table = self.tables[name]
            assert isinstance(table, FactTable)  # _collects holds facts only
            commits.append(functools.partial(
                self._append_collected, spark, landing(decoded, name), table, epoch
            ))  # fmt: skip
        bad = quarantined(decoded, epoch, datetime.now(UTC))
        if bad.num_rows:
            rows = bad.cast(arrow_schema(QUARANTINE_TABLE))
            commits.append(functools.partial(self._append_quarantine, spark, rows, epoch))
        if counts:
            self._commit(spark, epoch, counts, commits, started, how)

    def _append_collected(
        self, spark: SparkSession, rows: pa.Table, table: FactTable, epoch: int
    ) -> None:
        typed = typed_facts(rows, table.schema, epoch)
        if typed is not None:
            self._append_small(typed, table.name, epoch)
        else:
            typed_by_spark = _fact_rows(spark.createDataFrame(rows), table, epoch)
            self._append_fact(typed_by_spark, table.name, epoch, rows.num_rows)

    def _cut(self, spark: SparkSession, df: DataFrame) -> tuple[DataFrame, DataFrame | None]:
        """The rows to land now, ending at the consistent cut of what was read and what
        waited; and what waits from now on (None: nothing waited and nothing does)."""
        rows = df
        if self.holding:
            path = table_path(self.root, HELD_TABLE.name)
            waited = spark.read.format("delta").option("versionAsOf", self.held_version)
            rows = df.unionByName(waited.load(path))
        special = F.col("table").isin(*MARKS)
        marks = F.when(special | F.col("commit_end"), F.struct(
            "offset", "table", "row", "deleted", "commit_end"
        ))  # fmt: skip
        read = (
            rows.groupBy("partition")
            .agg(F.max("offset").alias("last"), F.collect_list(marks).alias("marks"))
            .collect()
        )
        last = {int(r["partition"]): int(r["last"]) for r in read}
        cut = consistent_cut(
            (_marker(int(r["partition"]), m) for r in read for m in r["marks"]), last
        )
        was_holding, self.holding = self.holding, cut.holds_back(last)
        if not was_holding and not self.holding:
            return rows.where(~special), None
        upto = F.create_map(*[F.lit(x) for p, o in cut.upto.items() for x in (p, o)])
        inside = F.col("offset") <= F.element_at(upto, F.col("partition"))
        waiting = F.lit(False)
        if cut.waiting:
            waiting = (F.col("table") == PREPARED) & F.col("row").isin(*sorted(cut.waiting))
        if self.holding:
            log.info(
                "%s: the consistent cut ends partitions at %s (read to %s); %d 2PC "
                "transactions or spanning batches wait for their other partitions",
                self.query, cut.upto, last, len(cut.waiting),
            )  # fmt: skip
        return rows.where(inside & ~special), rows.where(~inside | waiting)

    def _hold(self, held: DataFrame, epoch: int) -> None:
        """Replace what waits in etl_held; a re-run that wrote it already leaves it."""
        path = table_path(self.root, HELD_TABLE.name)
        if self._holds(HELD_TABLE.name, epoch):
            if self.rerun_held_version is not None:
                self.held_version = self.rerun_held_version
            return
        mark = batch_mark(self.app, self.query, epoch)
        held.write.format("delta").mode("overwrite").option("userMetadata", mark).save(path)
        self.held_version = version_now(held.sparkSession, path)
        failpoints.hit("etl.after_table_commit")

    def _own(self) -> list[str]:
        """The tables only this query writes: their versions make its epochs."""
        return [*self.tables, *([self.after.table] if self.after is not None else [])]

    def _resume(self, spark: SparkSession, epoch: int) -> None:
        """Which tables hold the run's first micro-batch: Spark re-runs one it never marked
        done, and a kill may have come after some of its table commits."""
        self.resumed = True
        mark = batch_mark(self.app, self.query, epoch)
        tables = {n: recent(spark, table_path(self.root, n)) for n in self._own()}
        tables |= {t.name: recent(spark, table_path(self.root, t.name)) for t in SHARED}
        if self.consistent:
            waiting = recent(spark, table_path(self.root, HELD_TABLE.name))
            tables[HELD_TABLE.name] = waiting
            # a re-run reads what waited before its first run wrote, then goes on from that
            self.rerun_held_version = waiting.marks.get(mark)
            rerun = self.rerun_held_version
            self.held_version = waiting.version if rerun is None else rerun - 1
        held = {n for n, r in tables.items() if mark in r.marks}
        self.held = {epoch: held}
        self.versions = {n: tables[n].version for n in self._own()}
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
        sizes = _per_table(counts)
        for name in sorted(_landed(counts) & self.tables.keys()):
            rows = df.where((F.col("table") == name) & F.col("reason").isNull())
            table = self.tables[name]
            if isinstance(table, FactTable):
                commits.append(functools.partial(
                    self._append_fact, _fact_rows(rows, table, epoch), name, epoch, sizes[name]
                ))  # fmt: skip
            else:
                commits.append(functools.partial(
                    self._merge, _mirror_rows(rows, table, epoch), table, epoch
                ))  # fmt: skip
        if any(c["reason"] is not None for c in counts):
            bad = _quarantine_rows(df.where(F.col("reason").isNotNull()), epoch)
            commits.append(functools.partial(self._append, bad, QUARANTINE_TABLE.name, epoch))
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
        if self.after is not None and _landed(counts):
            self._append_small(self.after.rows(epoch), self.after.table, epoch)
        done = time.time()
        row = _commit_row(self.query, counts, epoch, done, self.versions)
        self._append_small(row, ETL_COMMITS_TABLE.name, epoch)
        self._observe(counts, done)
        log.info(
            "%s micro-batch %d: %s in %.1fs%s",
            self.query,
            epoch,
            ", ".join(f"{t} {n}" for t, n in sorted(_per_table(counts).items())),
            time.monotonic() - started,
            f", {how}" if how else "",
        )

    def _holds(self, table: str, epoch: int) -> bool:
        """Whether the table holds this micro-batch already (a re-run's, committed before)."""
        return table in self.held.get(epoch, ())

    def _append(self, rows: DataFrame, table: str, epoch: int) -> None:
        if self._holds(table, epoch):
            return
        path = table_path(self.root, table)
        shared = any(t.name == table for t in SHARED)
        jvm = rows.sparkSession.sparkContext._jvm
        with shared_commit(jvm, self.lock) if shared else contextlib.nullcontext():
            (
                rows.write.format("delta")
                .mode("append")
                .option("userMetadata", batch_mark(self.app, self.query, epoch))
                .save(path)
            )
        if table in self.versions:
            self.versions[table] = version_now(rows.sparkSession, path)
        failpoints.hit("etl.after_table_commit")

    def _append_fact(self, rows: DataFrame, table: str, epoch: int, size: int) -> None:
        if size > self.driver_rows:
            self._append(rows, table, epoch)
        elif not self._holds(table, epoch):
            self._append_small(rows.toArrow(), table, epoch)

    def _append_quarantine(self, spark: SparkSession, rows: pa.Table, epoch: int) -> None:
        """Under the lock of Spark's commits to it: Spark's rename onto a log entry would
        overwrite one delta-rs made in between (`shared.py`)."""
        with shared_commit(spark.sparkContext._jvm, self.lock):
            self._append_small(rows, QUARANTINE_TABLE.name, epoch)

    def _append_small(self, rows: pa.Table, table: str, epoch: int) -> None:
        if self._holds(table, epoch):
            return
        mark = batch_mark(self.app, self.query, epoch)
        version = append_rows(table_path(self.root, table), rows, mark)
        if table in self.versions:
            self.versions[table] = version
        failpoints.hit("etl.after_table_commit")

    def _merge(self, rows: DataFrame, table: MirrorTable, epoch: int) -> None:
        if self._holds(table.name, epoch):
            return
        mark = batch_mark(self.app, self.query, epoch)
        path = table_path(self.root, table.name)
        changes = rows.toArrow()
        self.versions[table.name] = merge_changes(path, changes, table.key, table.dimension, mark)
        failpoints.hit("etl.after_table_commit")

    def _observe(self, counts: Sequence[Count], done: float) -> None:
        for c in counts:
            table, reason, n = c["table"], c["reason"], int(c["count"])
            if reason is not None:
                QUARANTINED.labels(table, reason).inc(n)
                self.stats.quarantined[(table, reason)] += n
                continue
            ROWS.labels(table).inc(n)
            self.stats.rows[table] += n
            age = max(0.0, done - c["kafka_ts_ms"] / 1000)
            histogram = FRESHNESS.labels(table)
            for _ in range(n):
                histogram.observe(age)
            self.stats.freshness_s.extend([age] * n)


def _marker(partition: int, m: Row) -> Marker:
    """A decoded marker row for the cut: a commit's end, a prepared row, a spanning part."""
    offset, end = int(m["offset"]), bool(m["commit_end"])
    if m["table"] == PREPARED:
        return Marker(partition, offset, end, m["row"], bool(m["deleted"]))
    if m["table"] == SPAN:
        part = json.loads(m["row"])
        return Marker(partition, offset, end, part["txn"], True, tuple(part["parts"]))
    return Marker(partition, offset, end)


def _landed(counts: Sequence[Count]) -> set[str]:
    return {c["table"] for c in counts if c["reason"] is None}


def _per_table(counts: Sequence[Count]) -> dict[str, int]:
    out: Tally[str] = Tally()
    for c in counts:
        out[c["table"] if c["reason"] is None else f"{c['table']} quarantined"] += int(c["count"])
    return dict(out)


def _kafka_meta(epoch: int) -> list[Column]:
    committed = F.timestamp_millis(F.col("kafka_ts_ms"))
    return [
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
        committed.alias("committed_at"),
        F.lit(epoch).cast("bigint").alias("etl_batch"),
    ]


def _fact_rows(rows: DataFrame, table: FactTable, epoch: int) -> DataFrame:
    data = F.from_json("row", table.schema)
    typed = rows.select(data.alias("r"), "batch_id", "seq", *_kafka_meta(epoch))
    columns = table.schema.fieldNames()
    own = FACT_OWN - {"committed_date"}  # computed below, from committed_at
    out = typed.select(
        *[F.col(f"r.{c}").alias(c) for c in columns if c not in FACT_OWN],
        *[F.col(c) for c in own],
    ).withColumn("committed_date", F.to_date("committed_at"))
    return out.select(*columns)


def _mirror_rows(rows: DataFrame, table: MirrorTable, epoch: int) -> DataFrame:
    """One typed change per key: the last in offset order, with the key's last known data.

    A tombstone carries only the key. A dimension keeps a deleted row, so it needs the row's
    last values, which may come from an earlier change in the same micro-batch (a contestant
    added and removed at once) or, failing that, from the table (the MERGE keeps them).
    """
    typed = rows.select(
        F.from_json("row", table.schema).alias("r"),
        F.col("deleted").alias("_deleted"),
        *_kafka_meta(epoch),
    )
    by_key = Window.partitionBy(*[F.col(f"r.{k}") for k in table.key])
    in_order = by_key.orderBy("source_partition", "source_offset")
    whole = in_order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    newest_first = (F.desc("source_partition"), F.desc("source_offset"))
    data = F.when(~F.col("_deleted"), F.col("r"))
    last = (
        typed.withColumn("_known", F.last(data, ignorenulls=True).over(whole))
        .withColumn("_n", F.row_number().over(by_key.orderBy(*newest_first)))
        .where("_n = 1")
    )
    meta = ("source_partition", "source_offset", "committed_at", "etl_batch")
    columns = [c for c in table.schema.fieldNames() if c not in meta and c != "is_current"]
    return last.select(
        *[F.col(f"r.{c}" if c in table.key else f"_known.{c}").alias(c) for c in columns],
        *[F.col(c) for c in meta],
        "_deleted",
        F.col("_known").isNotNull().alias("_known"),
    )


def _quarantine_rows(rows: DataFrame, epoch: int) -> DataFrame:
    return rows.select(
        F.col("table").alias("target_table"),
        "reason",
        "detail",
        "payload",
        F.col("topic").alias("source_topic"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
        "batch_id",
        F.timestamp_millis(F.col("kafka_ts_ms")).alias("committed_at"),
        F.lit(epoch).cast("bigint").alias("etl_batch"),
        F.current_timestamp().alias("quarantined_at"),
    )


def _commit_row(
    query: str, counts: Sequence[Count], epoch: int, done: float, versions: Mapping[str, int]
) -> pa.Table:
    landed = sum(int(c["count"]) for c in counts if c["reason"] is None)
    bad = sum(int(c["count"]) for c in counts if c["reason"] is not None)
    stamps = [int(c["kafka_ts_ms"]) for c in counts]
    row = {
        "query": query,
        "etl_batch": epoch,
        "committed_at": datetime.fromtimestamp(done, UTC),
        "rows": landed,
        "quarantined": bad,
        "first_kafka_ts": datetime.fromtimestamp(min(stamps) / 1000, UTC),
        "last_kafka_ts": datetime.fromtimestamp(max(stamps) / 1000, UTC),
        "versions": dict(versions),
    }
    return pa.Table.from_pylist([row], arrow_schema(ETL_COMMITS_TABLE))
