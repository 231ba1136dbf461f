"""One app's warehouse, built from its config file (`config.py`): queries, tables, snapshots.

Two or three streaming queries per app:
- `streams`: every fact's stream topic, one row per tuple;
- `changelog`: the app's changelog into its mirrors, whole Kafka transactions per
  micro-batch, followed by the snapshot when the config has one;
- `ingest`: raw client events, when a raw topic is given and the config has `[raw]`.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from txstream.kafka.topics import AppTopics
from txstream_etl.config import Snapshot, SnapshotValue, WarehouseConfig, tables
from txstream_etl.evolution import Writers
from txstream_etl.plan import ChangelogSource, Plan, RawSource, StateTable, StreamSource
from txstream_etl.tables import (
    ETL_COMMITS_TABLE,
    HELD_TABLE,
    QUARANTINE_TABLE,
    FactTable,
    MirrorTable,
    SystemTable,
    Table,
    arrow_schema,
    ensure_table,
    table_path,
)
from txstream_etl.writer import AfterBatch

MIRRORS_QUERY = "changelog"  # the query that loads the mirrors (and the snapshot)


class SnapshotError(RuntimeError):
    """A snapshot value's SQL does not run on the warehouse's tables."""


@dataclass(frozen=True)
class Query:
    """One streaming query: its sources, the tables they land in, and whether it snapshots."""

    name: str
    plan: Plan
    tables: dict[str, FactTable | MirrorTable]
    snapshots: bool = False
    rate_limited: bool = True  # False: its micro-batches must hold whole Kafka transactions
    consistent: bool = False  # ends each micro-batch at a consistent cut (`cut.py`)


class Warehouse:
    def __init__(
        self,
        app: str,
        root: str,
        schema_dir: str,
        config: WarehouseConfig,
        raw_topic: str | None,
        writers: Writers | None = None,
    ) -> None:
        self.app = app
        self.writers = writers or {}  # stream -> earlier tuple schemas its records may carry
        self.root = root
        self.schema_dir = schema_dir
        self.config = config
        self.raw_topic = raw_topic if config.raw is not None else None

    def queries(self) -> list[Query]:
        topics, config = AppTopics(self.app), self.config
        out = []
        if config.facts:
            sources: dict[str, StreamSource | ChangelogSource | RawSource] = {
                topics.stream(f.stream): StreamSource(
                    f.stream,
                    f.schema,
                    f.table.name,
                    f.rule,
                    f.rename,
                    self.writers.get(f.stream, ()),
                    f.broadcast,
                )
                for f in config.facts
            }
            facts = {f.table.name: f.table for f in config.facts}
            out.append(Query("streams", Plan(self.schema_dir, sources), dict(facts)))
        if config.mirrors:
            state = {
                m.engine_table: StateTable(m.schema, m.table.name, m.table.key, m.rule, m.rename)
                for m in config.mirrors
            }
            changelog = Plan(self.schema_dir, {topics.changelog: ChangelogSource(state)})
            mirrors = {m.table.name: m.table for m in config.mirrors}
            snapshots = config.snapshot is not None
            out.append(
                Query(
                    MIRRORS_QUERY,
                    changelog,
                    dict(mirrors),
                    snapshots,
                    rate_limited=False,
                    consistent=True,
                )
            )
        if self.raw_topic and config.raw is not None:
            raw = config.raw
            plan = Plan(self.schema_dir, {self.raw_topic: RawSource(raw.table.name, raw.rule)})
            out.append(Query("ingest", plan, {raw.table.name: raw.table}))
        return out

    def tables(self) -> list[FactTable | MirrorTable | SystemTable]:
        """The config's tables that this run writes: the raw one only with a raw topic."""
        raw = self.config.raw
        return [
            t
            for t in tables(self.config)
            if raw is None or t is not raw.table or self.raw_topic is not None
        ]

    def ensure(self, spark: SparkSession) -> None:
        """Create the missing tables, side by side (each is one Delta commit)."""
        wanted: list[Table] = [*self.tables(), QUARANTINE_TABLE, ETL_COMMITS_TABLE]
        if self.config.mirrors:
            wanted.append(HELD_TABLE)
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda t: ensure_table(spark, self.root, t), wanted))

    def after_batch(self) -> AfterBatch | None:
        """What is written after each changelog micro-batch: the snapshot, if there is one."""
        snapshot = self.config.snapshot
        if snapshot is None:
            return None

        def take(epoch: int) -> pa.Table:
            doc = self.snapshot_document(snapshot)
            row = {
                "etl_batch": epoch,
                "taken_at": datetime.now(UTC),
                **{v.name: doc[v.name] for v in snapshot.values if v.column},
                "document": json.dumps(doc, sort_keys=True),
            }
            return pa.Table.from_pylist([row], arrow_schema(snapshot.table))

        return AfterBatch(snapshot.table.name, take)

    def snapshot_document(self, snapshot: Snapshot) -> dict[str, Any]:
        """The document as the Delta tables show it now (after this micro-batch).

        Its values are small queries over small tables, run by delta-rs (DataFusion's SQL) in
        the driver: as Spark SQL they were ~20 Spark jobs and 4-5 s of the driver's CPU per
        micro-batch, taken from the facts' query.
        """
        queries = QueryBuilder()
        for table in self.tables():
            if any(re.search(rf"\b{re.escape(table.name)}\b", v.sql) for v in snapshot.values):
                queries.register(table.name, DeltaTable(table_path(self.root, table.name)))
        return {v.name: _value(queries, v) for v in snapshot.values}


def _value(queries: QueryBuilder, value: SnapshotValue) -> Any:
    try:
        records = pa.table(queries.execute(value.sql).read_all()).to_pylist()
    except Exception as e:  # delta-rs raises DataFusion's errors as plain exceptions
        raise SnapshotError(f"the snapshot's value {value.name!r} failed: {e}") from e
    rows = [tuple(r.values()) for r in records]  # as "rows": an Arrow struct, a JSON array
    if value.shape == "scalar":
        return rows[0][0] if rows else None
    if value.shape == "map":
        return {r[0]: r[1] for r in rows}
    if value.shape == "rows":
        return rows
    return records


def latest_snapshot(spark: SparkSession, root: str, snapshot: Snapshot) -> str | None:
    """The newest snapshot's `show` values, as one line for people."""
    snapshots = spark.read.format("delta").load(table_path(root, snapshot.table.name))
    newest = snapshots.orderBy(F.desc("etl_batch")).limit(1).collect()
    if not newest:
        return None
    doc = json.loads(newest[0]["document"])
    return "  ".join(f"{name} {doc[name]}" for name in snapshot.show)
