"""Which Kafka records a micro-batch reads, known before any Spark job reads them.

Spark writes a micro-batch's end offsets to the query's offset log (`offsets/<id>` in its
checkpoint) before running it, and the previous micro-batch's end is this one's start. Their
difference bounds the records read (transaction markers take offsets too), so the writer can
decide to collect a micro-batch into the driver without first counting it in a Spark job,
and the driver can read those offsets itself (`direct.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

Offsets = dict[str, dict[str, int]]  # topic -> partition -> next offset


@dataclass(frozen=True)
class Planned:
    """A micro-batch's offsets: per topic and partition, where it starts and ends (the next
    offset after it). A partition missing from `start` is new, and read from its earliest."""

    start: Offsets
    end: Offsets

    def ranges(self) -> list[tuple[str, int, int | None, int]]:
        """(topic, partition, first offset or None for the earliest, end) of each partition
        the micro-batch reads anything of."""
        out = []
        for topic, partitions in sorted(self.end.items()):
            for partition, end in sorted(partitions.items(), key=lambda p: int(p[0])):
                first = self.start.get(topic, {}).get(partition)
                if first is None or first < end:
                    out.append((topic, int(partition), first, end))
        return out

    @property
    def records(self) -> int:
        """At most how many records it reads. A new partition's earliest offset is 0 or
        more: counting from 0 keeps the bound an upper one."""
        return sum(end - (first or 0) for _, _, first, end in self.ranges())


def planned(spark: SparkSession, checkpoint: str, epoch: int) -> Planned | None:
    """Micro-batch `epoch`'s offsets; None when the log cannot say (the run's first
    micro-batch starts at offsets only the broker knows)."""
    if epoch < 1:
        return None
    end = _logged(spark, f"{checkpoint.rstrip('/')}/offsets/{epoch}")
    start = _logged(spark, f"{checkpoint.rstrip('/')}/offsets/{epoch - 1}")
    if end is None or start is None:
        return None
    return Planned(start, end)


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
