"""How many Kafka records a micro-batch spans, known before any Spark job reads them.

Spark writes a micro-batch's end offsets to the query's offset log (`offsets/<id>` in its
checkpoint) before running it, and the previous micro-batch's end is this one's start. Their
difference bounds the records read (transaction markers take offsets too), so the writer can
decide to collect a micro-batch into the driver without first counting it in a Spark job.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

Offsets = dict[str, dict[str, int]]  # topic -> partition -> next offset


def planned_records(spark: SparkSession, checkpoint: str, epoch: int) -> int | None:
    """At most how many records micro-batch `epoch` reads; None when the log cannot say (the
    run's first micro-batch starts at offsets only the broker knows)."""
    if epoch < 1:
        return None
    end = _logged(spark, f"{checkpoint.rstrip('/')}/offsets/{epoch}")
    start = _logged(spark, f"{checkpoint.rstrip('/')}/offsets/{epoch - 1}")
    if end is None or start is None:
        return None
    # A partition new since the last micro-batch is read from its earliest offset, which is
    # 0 or more: counting from 0 keeps the bound an upper one.
    return sum(
        max(0, offset - start.get(topic, {}).get(partition, 0))
        for topic, partitions in end.items()
        for partition, offset in partitions.items()
    )


def parse_log_entry(text: str) -> Offsets:
    """The sources' offsets of one offset-log entry: a version line, the batch's metadata,
    then one line per source (`-` for a source with none yet)."""
    offsets: Offsets = {}
    for line in text.splitlines()[2:]:
        if line.strip() in ("", "-"):
            continue
        for topic, partitions in json.loads(line).items():
            offsets[topic] = {str(p): int(o) for p, o in partitions.items()}
    return offsets


def _logged(spark: SparkSession, uri: str) -> Offsets | None:
    """One entry of the offset log, read through Hadoop's file system as Spark wrote it."""
    jvm: Any = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return parse_log_entry(str(text))
