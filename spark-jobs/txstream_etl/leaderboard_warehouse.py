"""The Leaderboard's warehouse: which topics feed which Delta tables, and its snapshots.

- `votes`: fact, every accepted vote (stream `accepted_votes`), one row per tuple;
- `contestants`: dimension (engine table `contestants`); a removed contestant stays, with
  `is_current = false` and its last vote count, so old votes still join to it;
- `removals`: the removal history (engine table `removed`), in removal order `seq`;
- `stats`, `trending`: the counters and trending counts the leaderboards need;
- `leaderboard_snapshots`: after each micro-batch that changed state, the result document
  (top3, bottom3, trending3, accepted, rejected, removed) computed from the Delta tables;
- `ingested_votes`: votes from raw client events, normalized from CSV and JSON dialects.

The engine's `votes` table (current votes only) is the `votes` fact minus the votes of
removed contestants, which the engine deletes when it removes them.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from leaderboard.dataflow import Params, build_app
from leaderboard.results import result_document
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Key, Record
from txstream_etl.plan import ChangelogSource, Plan, RawSource, StateTable, StreamSource
from txstream_etl.tables import (
    ETL_COMMITS_TABLE,
    QUARANTINE_TABLE,
    FactTable,
    MirrorTable,
    SystemTable,
    Table,
    ensure_table,
    table_path,
)
from txstream_etl.writer import txn_app_id

VOTE = "vote_id BIGINT, phone_number BIGINT, contestant_number BIGINT"
VOTES = FactTable("votes", f"{VOTE}, state STRING")
INGESTED_VOTES = FactTable("ingested_votes", f"{VOTE}, cast_at TIMESTAMP, source_format STRING")
CONTESTANTS = MirrorTable(
    "contestants",
    "contestant_number BIGINT, contestant_name STRING, num_votes BIGINT",
    key=("contestant_number",),
    dimension=True,
)
REMOVALS = MirrorTable(
    "removals",
    "seq BIGINT, contestant_number BIGINT, num_votes BIGINT, at_accepted BIGINT",
    key=("seq",),
)
STATS = MirrorTable(
    "stats", "counter STRING, detail STRING, value BIGINT", key=("counter", "detail")
)
TRENDING = MirrorTable(
    "trending", "contestant_number BIGINT, value BIGINT", key=("contestant_number",)
)
BOARD = "ARRAY<STRUCT<contestant_number: BIGINT, num_votes: BIGINT>>"
SNAPSHOTS = SystemTable(
    "leaderboard_snapshots",
    f"etl_batch BIGINT, taken_at TIMESTAMP, accepted BIGINT, rejected MAP<STRING, BIGINT>, "
    f"top3 {BOARD}, bottom3 {BOARD}, trending3 {BOARD}, "
    "removed ARRAY<STRUCT<contestant_number: BIGINT, num_votes: BIGINT, at_accepted: BIGINT>>, "
    "document STRING",
)
ALL_TABLES: tuple[Table, ...] = (
    VOTES,
    INGESTED_VOTES,
    CONTESTANTS,
    REMOVALS,
    STATS,
    TRENDING,
    SNAPSHOTS,
    QUARANTINE_TABLE,
    ETL_COMMITS_TABLE,
)


@dataclass(frozen=True)
class Query:
    """One streaming query: its sources, the tables they land in, and whether it snapshots."""

    name: str
    plan: Plan
    tables: dict[str, FactTable | MirrorTable]
    snapshots: bool = False
    rate_limited: bool = True  # False: its micro-batches must hold whole Kafka transactions


class LeaderboardWarehouse:
    def __init__(self, app: str, root: str, schema_dir: str, raw_topic: str | None) -> None:
        self.app = app
        self.root = root
        self.schema_dir = schema_dir
        self.raw_topic = raw_topic
        # Schema names come from the app's own declarations, so they cannot drift.
        self.decl = build_app(Params(), name=app).decl

    def _schema(self, table: str) -> str:
        return self.decl.tables[table].schema

    def queries(self) -> list[Query]:
        topics = AppTopics(self.app)
        accepted = self.decl.streams["accepted_votes"].schema
        streams = Plan(
            self.schema_dir,
            {
                topics.stream("accepted_votes"): StreamSource(
                    "accepted_votes", accepted, VOTES.name, "accepted_vote"
                )
            },
        )
        state = {
            "contestants": StateTable(
                self._schema("contestants"), CONTESTANTS.name, CONTESTANTS.key, "contestant"
            ),
            "removed": StateTable(self._schema("removed"), REMOVALS.name, REMOVALS.key),
            "stats": StateTable(self._schema("stats"), STATS.name, STATS.key),
            "trending": StateTable(self._schema("trending"), TRENDING.name, TRENDING.key),
        }
        changelog = Plan(self.schema_dir, {topics.changelog: ChangelogSource(state)})
        mirrors: dict[str, FactTable | MirrorTable] = {
            t.name: t for t in (CONTESTANTS, REMOVALS, STATS, TRENDING)
        }
        out = [
            Query("streams", streams, {VOTES.name: VOTES}),
            Query("changelog", changelog, mirrors, snapshots=True, rate_limited=False),
        ]
        if self.raw_topic:
            raw = Plan(self.schema_dir, {self.raw_topic: RawSource(INGESTED_VOTES.name)})
            out.append(Query("ingest", raw, {INGESTED_VOTES.name: INGESTED_VOTES}))
        return out

    def ensure(self, spark: SparkSession) -> None:
        """Create the missing tables, side by side (each is one Delta commit)."""
        tables = [t for t in ALL_TABLES if self.raw_topic or t is not INGESTED_VOTES]
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda t: ensure_table(spark, self.root, t), tables))

    def snapshot(self, spark: SparkSession, epoch: int) -> None:
        """Append the leaderboards as the Delta tables show them after this micro-batch."""
        doc = result_document(self.tables(spark))
        boards = {
            name: [{"contestant_number": c, "num_votes": n} for c, n in doc[name]]
            for name in ("top3", "bottom3", "trending3")
        }
        row = {
            "etl_batch": epoch,
            "taken_at": datetime.now(UTC),
            "accepted": doc["accepted"],
            "rejected": doc["rejected"],
            **boards,
            "removed": doc["removed"],
            "document": json.dumps(doc, sort_keys=True),
        }
        (
            spark.createDataFrame([row], SNAPSHOTS.schema)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", txn_app_id(self.app, "changelog"))
            .option("txnVersion", epoch)
            .save(table_path(self.root, SNAPSHOTS.name))
        )

    def tables(self, spark: SparkSession) -> dict[str, dict[Key, Record]]:
        """The engine's board tables as the warehouse holds them, keyed as the engine keys."""

        def read(table: Table) -> list[dict[str, Any]]:
            df = spark.read.format("delta").load(table_path(self.root, table.name))
            return [r.asDict() for r in df.collect()]

        stats: dict[Key, Record] = {}
        for r in read(STATS):
            key = (r["counter"],) if r["detail"] is None else (r["counter"], r["detail"])
            stats[key] = {"value": r["value"]}
        return {
            "contestants": {
                (r["contestant_number"],): r for r in read(CONTESTANTS) if r["is_current"]
            },
            "removed": {(r["seq"],): r for r in read(REMOVALS)},
            "trending": {(r["contestant_number"],): r for r in read(TRENDING)},
            "stats": stats,
        }


def latest_snapshot(spark: SparkSession, root: str) -> str | None:
    """The newest snapshot's boards, as one line for people."""
    snapshots = spark.read.format("delta").load(table_path(root, SNAPSHOTS.name))
    newest = snapshots.orderBy(F.desc("etl_batch")).limit(1).collect()
    if not newest:
        return None
    doc = json.loads(newest[0]["document"])
    return "  ".join(f"{name} {doc[name]}" for name in ("top3", "bottom3", "trending3"))
