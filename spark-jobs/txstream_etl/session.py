"""The Spark session every ETL job uses, from txstream's Settings.

The master URL and the jar directory are settings, so a cluster is configuration: Delta
and the Kafka source come from `build/spark/jars` (`make spark-jars`, Maven), never from
Ivy at run time; `spark.jars` ships them to a cluster's executors. A local master, or the
native stack's cluster (`stack/spark.py`), has the driver bound to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from txstream.config import Settings
from txstream_etl.pools import allocation_file


class SparkSetupError(RuntimeError):
    """Spark cannot start as configured (e.g. its jars were never fetched)."""


def spark_session(settings: Settings, name: str, ui: bool = False) -> SparkSession:
    jars = sorted(settings.spark_jars.glob("*.jar")) if settings.spark_jars.is_dir() else []
    if not any(j.name.startswith("delta-spark") for j in jars):
        raise SparkSetupError(
            f"no Delta jar in {settings.spark_jars} (setting spark_jars): run `make spark-jars`"
        )
    # Python workers run this interpreter, so they import txstream and this package as the
    # driver does (Spark's default is whatever `python3` is on the PATH).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(name)
        # spark.jars ships them to executors; the driver's class path makes them visible to
        # py4j too (Delta's Python API calls into the jar through it).
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.driver.extraClassPath", ":".join(str(j) for j in jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.ui.enabled", str(ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Small micro-batches: a few partitions beat Spark's 200 shuffle and 50 Delta
        # snapshot partitions, which cost seconds of task overhead per commit.
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
        .config("spark.scheduler.mode", "FAIR")  # a pool per query: pools.py
        .config("spark.scheduler.allocation.file", str(allocation_file(settings.home)))
    )
    if settings.spark_jvm_options:
        # pyspark starts the driver's JVM with the builder's conf, so this reaches it too.
        builder = builder.config("spark.driver.extraJavaOptions", settings.spark_jvm_options)
        builder = builder.config("spark.executor.extraJavaOptions", settings.spark_jvm_options)
    master = settings.spark_master
    if master.startswith("local") or urlsplit(master).hostname in ("127.0.0.1", "localhost"):
        # This machine's cluster (the native stack's) or none: executors reach the driver here.
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    if master.startswith("local"):
        # File listing (VACUUM's above all) defaults to 10,000 tasks, sized for clusters:
        # minutes per table on two cores.
        builder = builder.config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "4")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
