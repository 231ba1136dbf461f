"""A changelog query's micro-batches ended at the consistent cut, the rest kept in `etl_held`.

Each micro-batch reads what waited in `etl_held` beside what Spark read, collects the
partitions' last offsets and marker rows, lands the rows inside the cut (`cut.py` finds it)
and leaves those past it, or of a transaction still waiting for its other partitions, to
wait in `etl_held` for the next one. `HeldRows` keeps which `etl_held` version that reads.
"""

from __future__ import annotations

import json
import logging

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from txstream_etl.cut import MARKS, PREPARED, SPAN, Marker, consistent_cut
from txstream_etl.marks import Recent, version_now
from txstream_etl.tables import HELD_TABLE, table_path

log = logging.getLogger("txstream.etl")


class HeldRows:
    """What waits in one changelog query's `etl_held`, between its micro-batches."""

    def __init__(self, root: str, query: str) -> None:
        self.path = table_path(root, HELD_TABLE.name)
        self.query = query
        self.holding = True  # whether records wait in etl_held (read once to know)
        self.version = -1  # the etl_held version the next micro-batch reads
        self.rerun_version: int | None = None  # etl_held's after the re-run, if written

    def resume(self, waiting: Recent, mark: str) -> None:
        """Start from etl_held's recent commits; `mark` is the run's first micro-batch's."""
        # a re-run reads what waited before its first run wrote, then goes on from that
        self.rerun_version = waiting.marks.get(mark)
        rerun = self.rerun_version
        self.version = waiting.version if rerun is None else rerun - 1

    def cut(self, spark: SparkSession, df: DataFrame) -> tuple[DataFrame, DataFrame | None]:
        """The rows to land now, ending at the consistent cut of what was read and what
        waited; and what waits from now on (None: nothing waited and nothing does)."""
        rows = df
        if self.holding:
            waited = spark.read.format("delta").option("versionAsOf", self.version)
            rows = df.unionByName(waited.load(self.path))
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

    def replace(self, held: DataFrame, mark: str) -> None:
        """Overwrite etl_held with what waits now, in one commit marked `mark`."""
        held.write.format("delta").mode("overwrite").option("userMetadata", mark).save(self.path)
        self.version = version_now(held.sparkSession, self.path)

    def kept(self) -> None:
        """The re-run's first run replaced etl_held already: read on from its version."""
        if self.rerun_version is not None:
            self.version = self.rerun_version


def _marker(partition: int, m: Row) -> Marker:
    """A decoded marker row for the cut: a commit's end, a prepared row, a spanning part."""
    offset, end = int(m["offset"]), bool(m["commit_end"])
    if m["table"] == PREPARED:
        return Marker(partition, offset, end, m["row"], bool(m["deleted"]))
    if m["table"] == SPAN:
        part = json.loads(m["row"])
        return Marker(partition, offset, end, part["txn"], True, tuple(part["parts"]))
    return Marker(partition, offset, end)
