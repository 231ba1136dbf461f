"""Spark's own account of each micro-batch, as metrics and a log line.

Freshness says how late rows are; this says where a micro-batch's time went, in Spark's
terms (`StreamingQueryProgress.durationMs`): `addBatch` is our `foreachBatch` (its Spark
jobs and commits), `walCommit` and `commitOffsets` the checkpoint's offset and commit logs,
`latestOffset` and `getBatch` the Kafka source, `queryPlanning` the plan, and
`triggerExecution` the whole. Measuring it was how the ETL's slow stages were found
(`docs/benchmarks.md`); a user tuning a warehouse needs the same view. Its rows are those
Spark's jobs read: none for a micro-batch the driver read from Kafka itself (`direct.py`),
whose rows the writer's own line counts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from txstream_etl.metrics import MICRO_BATCH

log = logging.getLogger("txstream.etl")
# The stages of a micro-batch's `durationMs` (Spark's MicroBatchExecution).
STAGES = ("addBatch", "commitOffsets", "getBatch", "latestOffset", "queryPlanning",
          "triggerExecution", "walCommit")  # fmt: skip


def query_label(name: str | None) -> str:
    """The query's own name: Spark's is `app:query`."""
    return (name or "").rpartition(":")[2] or "unnamed"


def expect(query: str) -> None:
    """Export the query's series at zero before its first micro-batch. Prometheus computes
    a rate from a series' increase between its scrapes; a series first scraped with its
    only observations already in it has none, and a query that catches up in one or two
    micro-batches would leave its panel empty (seen in CI)."""
    for stage in STAGES:
        MICRO_BATCH.labels(query, stage)


def observe(name: str | None, batch: int, rows: int, durations: Mapping[str, int]) -> None:
    query = query_label(name)
    for stage, ms in durations.items():
        MICRO_BATCH.labels(query, stage).observe(ms / 1000)
    stages = ", ".join(f"{s} {ms} ms" for s, ms in sorted(durations.items()))
    line = "%s micro-batch %d: %d rows read by Spark; Spark's stages: %s"
    log.info(line, query, batch, rows, stages)


class MicroBatchProgress(StreamingQueryListener):
    """Registered for a run's queries (`job.run`); Spark calls it from its listener bus."""

    def onQueryStarted(self, event: Any) -> None:
        """Nothing to record before the first micro-batch."""

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        observe(p.name, int(p.batchId), int(p.numInputRows), dict(p.durationMs))

    def onQueryTerminated(self, event: Any) -> None:
        """The run's end is reported by the job (`job.run`)."""
