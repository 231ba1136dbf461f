"""The streaming ETL: one Structured Streaming query per source kind, into Delta.

Queries read with `kafka.isolation.level=read_committed`, so only committed transactions
reach the warehouse, decode in Spark's Python workers (`decode.decode_arrow`), and write
with `writer.MicroBatchWriter`. Each query has its own checkpoint, by default inside the
app's warehouse directory so the two are kept or dropped together; restarting on the same
checkpoint and warehouse resumes exactly where the last committed
micro-batch ended.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from txstream.commit.markers import COMMIT_END_HEADER
from txstream.config import Settings
from txstream.kafka.clients import SCRAM
from txstream.kafka.published_schemas import published
from txstream.kafka.routing import LEADER_KEY
from txstream.kafka.topics import AppTopics
from txstream.schemas.codec import WRITER_HEADER
from txstream.state.keys import encode_key
from txstream_etl.config import DRIVER_ROWS, WarehouseConfig
from txstream_etl.cut import PREPARED
from txstream_etl.decode import decode_arrow, imported
from txstream_etl.direct import DirectReader, readable
from txstream_etl.evolution import add_columns, additions, existing_schemas, stream_writers
from txstream_etl.plan import ChangelogSource, StreamSource
from txstream_etl.progress import MicroBatchProgress, expect
from txstream_etl.shared import lock_path
from txstream_etl.tables import DECODED_DDL, ETL_COMMITS_TABLE
from txstream_etl.warehouse import MIRRORS_QUERY, Query, Warehouse
from txstream_etl.writer import MicroBatchWriter

# Where the mirrors' query runs: in this driver with the others, in this driver alone (the
# second driver, `drivers.py`), or in a second driver and not here.
MirrorsAt = Literal["here", "only", "elsewhere"]


@dataclass(frozen=True)
class RunOptions:
    once: bool = False  # process what is committed now, then stop (availableNow)
    trigger_s: float = 1.0
    max_batches_per_trigger: int | None = None  # atomic batches (Kafka records) per trigger
    mirrors: MirrorsAt = "here"
    driver_rows: int = DRIVER_ROWS  # the largest fact micro-batch the driver appends itself
    direct_read: bool = True  # a small facts micro-batch read from Kafka by the driver

    def runs(self, query: Query) -> bool:
        if self.mirrors == "here":
            return True
        return (query.name == MIRRORS_QUERY) == (self.mirrors == "only")


def warehouse_root(settings: Settings) -> str:
    return settings.warehouse_uri or str(settings.home / "warehouse")


def app_root(settings: Settings, app: str) -> str:
    """Where the app's tables live: `<warehouse_uri>/<app>`."""
    return f"{warehouse_root(settings).rstrip('/')}/{app}"


def checkpoint(settings: Settings, app: str, query: str) -> str:
    if settings.checkpoint_uri:
        return f"{settings.checkpoint_uri.rstrip('/')}/{app}/{query}"
    return f"{app_root(settings, app)}/_checkpoints/{query}"


class WarehouseMismatch(RuntimeError):
    """A checkpoint without its tables: resuming would land nothing the checkpoint covers."""


def exists(spark: SparkSession, uri: str) -> bool:
    """Whether a path exists, on whatever file system its URI names (Hadoop's)."""
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return bool(path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).exists(path))


def kafka_options(settings: Settings) -> dict[str, str]:
    """The Kafka source's client options: the cluster, and on a secured one SCRAM over TLS
    as `kafka_user` (Spark redacts the password option in its logs and UI)."""
    options = {"kafka.bootstrap.servers": settings.bootstrap_servers}
    if settings.secure:
        secret = settings.kafka_secret().replace("\\", "\\\\").replace('"', '\\"')
        options |= {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": SCRAM,
            "kafka.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{settings.kafka_user}" password="{secret}";'
            ),
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(settings.ca_file),
        }
    return options


def mirrored(source: ChangelogSource) -> Column:
    """Changelog records of the tables the warehouse mirrors, and those whose key names no
    table (to be quarantined): the others, engine-internal state and tables the warehouse
    leaves out (nine in ten of the Leaderboard's records), never reach Python's decoder,
    save what the consistent cut needs (`cut.py`): commit ends and prepared rows."""
    key = F.col("key")
    named = F.substring(key, 1, 1) == F.lit(bytearray(encode_key(("",))[:1]))
    wanted = [
        F.substring(key, 1, len(prefix)) == F.lit(bytearray(prefix))
        for prefix in (encode_key((table,)) for table in [*source.tables, PREPARED])
    ]
    return functools.reduce(lambda a, b: a | b, wanted, key.isNull() | ~named | F.col("commit_end"))


def warm_python_workers(spark: SparkSession) -> None:
    """One Python worker per task slot, each with the decoder imported, before any query
    starts. A worker Spark starts mid-stream (one query's decode beside the other's) imports
    txstream inside a micro-batch's task: 0.8 s on an idle machine, 5.3 s measured on two
    busy cores, all of it in the facts' freshness. Spark keeps an idle worker for a minute."""
    slots = spark.sparkContext.defaultParallelism
    spark.range(slots, numPartitions=slots).mapInArrow(imported, "id BIGINT").collect()


def kafka_columns(loaded: DataFrame) -> DataFrame:
    """What the decoder takes of Kafka's records (`decode.KafkaRecord`; `direct.py` reads
    the same from Kafka in the driver)."""
    ends = F.filter("headers", lambda h: h["key"] == COMMIT_END_HEADER)
    return loaded.select(
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("kafka_ts_ms"),
        "key",
        "value",
        F.get(F.filter("headers", lambda h: h["key"] == WRITER_HEADER), 0)["value"]
        .cast("string")
        .alias("writer"),
        (F.size(ends) > 0).alias("commit_end"),
        F.get(ends, 0)["value"].cast("string").alias("spans"),
    )


def start_query(
    spark: SparkSession,
    settings: Settings,
    app: str,
    query: Query,
    writer: MicroBatchWriter,
    options: RunOptions,
) -> StreamingQuery:
    reader = (
        spark.readStream.format("kafka")
        .options(**kafka_options(settings))
        .option("subscribe", ",".join(query.plan.topics))
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
    )
    if options.max_batches_per_trigger and query.rate_limited:
        reader = reader.option("maxOffsetsPerTrigger", options.max_batches_per_trigger)
    kafka = kafka_columns(reader.load())
    for topic, source in query.plan.sources.items():
        if isinstance(source, ChangelogSource):
            kafka = kafka.where((F.col("topic") != topic) | mirrored(source))
        elif isinstance(source, StreamSource) and source.broadcast:
            # one copy of each batch: partition 0's when broadcast, else the leader's
            leader = F.col("key") == F.lit(LEADER_KEY)
            kafka = kafka.where((F.col("topic") != topic) | (F.col("partition") == 0) | leader)
    decoded = kafka.mapInArrow(functools.partial(decode_arrow, query.plan), DECODED_DDL)
    stream = (
        decoded.writeStream.queryName(f"{app}:{query.name}")
        .option("checkpointLocation", checkpoint(settings, app, query.name))
        .foreachBatch(writer)
    )
    if options.once:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{options.trigger_s} seconds")
    return stream.start()


def run(
    spark: SparkSession,
    settings: Settings,
    app: str,
    config: WarehouseConfig,
    raw_topic: str | None,
    options: RunOptions,
    on_start: Callable[[list[StreamingQuery]], None] | None = None,
) -> list[MicroBatchWriter]:
    """Run the app's queries: until caught up (`once`), else until one fails or stops."""
    root = app_root(settings, app)
    # Schema changes first: one the warehouse cannot follow stops the run before any write.
    versions = published(settings, AppTopics(app))
    writers = stream_writers(config, settings.schema_dir, versions)
    warehouse = Warehouse(app, root, str(settings.schema_dir), config, raw_topic, writers)
    added = additions(existing_schemas(spark, root, warehouse.tables()), warehouse.tables())
    for query in warehouse.queries():
        marks = f"{root}/{ETL_COMMITS_TABLE.name}"
        if exists(spark, checkpoint(settings, app, query.name)) and not exists(spark, marks):
            raise WarehouseMismatch(
                f"checkpoint {checkpoint(settings, app, query.name)} exists but the tables in "
                f"{root} do not: delete the checkpoint too, or restore the tables"
            )
    warehouse.ensure(spark)
    add_columns(spark, root, added)
    batch_writers, queries = [], []
    lock = lock_path(settings.run_dir, app)
    progress = MicroBatchProgress()
    spark.streams.addListener(progress)
    readers: list[DirectReader] = []
    for query in filter(options.runs, warehouse.queries()):
        after = warehouse.after_batch() if query.snapshots else None
        direct = None
        if options.direct_read and not query.consistent and readable(query.plan):
            direct = DirectReader(settings, query.plan)
            readers.append(direct)
        writer = MicroBatchWriter(
            root, app, query.name, query.tables, lock, after, query.consistent,
            driver_rows=options.driver_rows, checkpoint=checkpoint(settings, app, query.name),
            direct=direct,
        )  # fmt: skip
        batch_writers.append(writer)
        expect(query.name)
        queries.append(start_query(spark, settings, app, query, writer, options))
    if on_start is not None:
        on_start(queries)
    try:
        if options.once:
            for q in queries:
                q.awaitTermination()
        else:
            spark.streams.awaitAnyTermination()
    finally:
        for q in queries:
            q.stop()
        for reader in readers:
            reader.close()
        spark.streams.removeListener(progress)
    for q in queries:
        error = q.exception()
        if error is not None:
            raise error
    return batch_writers
