"""Spark's typing of a micro-batch's decoded rows into the columns of the table they land in.

A fact table gets its rows, a mirror one change per key, the quarantine the rejected rows,
each with the Kafka record it came from and the micro-batch. The driver's typing of a
collected micro-batch (`collected.py`) must give the same rows as these.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from txstream_etl.tables import FACT_OWN, FactTable, MirrorTable


def _kafka_meta(epoch: int) -> list[Column]:
    committed = F.timestamp_millis(F.col("kafka_ts_ms"))
    return [
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
        committed.alias("committed_at"),
        F.lit(epoch).cast("bigint").alias("etl_batch"),
    ]


def fact_rows(rows: DataFrame, table: FactTable, epoch: int) -> DataFrame:
    data = F.from_json("row", table.schema)
    typed = rows.select(data.alias("r"), "batch_id", "seq", *_kafka_meta(epoch))
    columns = table.schema.fieldNames()
    own = FACT_OWN - {"committed_date"}  # computed below, from committed_at
    out = typed.select(
        *[F.col(f"r.{c}").alias(c) for c in columns if c not in FACT_OWN],
        *[F.col(c) for c in own],
    ).withColumn("committed_date", F.to_date("committed_at"))
    return out.select(*columns)


def mirror_rows(rows: DataFrame, table: MirrorTable, epoch: int) -> DataFrame:
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


def quarantine_rows(rows: DataFrame, epoch: int) -> DataFrame:
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
