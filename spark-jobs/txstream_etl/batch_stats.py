"""What a micro-batch landed, from its counts per table, reason and Kafka timestamp.

The tables it landed rows in, its rows per table for the log, the rows, quarantine and
freshness metrics with the run's closing summary (`BatchStats`), and its `etl_commits` row.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from txstream_etl.collected import Count
from txstream_etl.metrics import FRESHNESS, QUARANTINED, ROWS
from txstream_etl.tables import ETL_COMMITS_TABLE, arrow_schema


@dataclass
class BatchStats:
    """What the query landed so far, for the run's closing summary."""

    rows: Tally[str] = field(default_factory=Tally)
    quarantined: Tally[tuple[str, str]] = field(default_factory=Tally)
    freshness_s: list[float] = field(default_factory=list)

    def observe(self, counts: Sequence[Count], done: float) -> None:
        """Count a micro-batch committed at `done` (epoch seconds), in the metrics too."""
        for c in counts:
            table, reason, n = c["table"], c["reason"], int(c["count"])
            if reason is not None:
                QUARANTINED.labels(table, reason).inc(n)
                self.quarantined[(table, reason)] += n
                continue
            ROWS.labels(table).inc(n)
            self.rows[table] += n
            age = max(0.0, done - c["kafka_ts_ms"] / 1000)
            histogram = FRESHNESS.labels(table)
            for _ in range(n):
                histogram.observe(age)
            self.freshness_s.extend([age] * n)


def landed_tables(counts: Sequence[Count]) -> set[str]:
    return {c["table"] for c in counts if c["reason"] is None}


def per_table(counts: Sequence[Count]) -> dict[str, int]:
    out: Tally[str] = Tally()
    for c in counts:
        out[c["table"] if c["reason"] is None else f"{c['table']} quarantined"] += int(c["count"])
    return dict(out)


def commit_row(
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
