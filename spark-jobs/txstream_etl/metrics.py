"""The ETL's Prometheus metrics; Grafana's ETL dashboard uses these names and labels.

- `txstream_etl_freshness_seconds{table}`: one observation per row landed, from its Kafka
  record's timestamp (set by the producer, so at most one group-commit interval before the
  commit) to the end of the Delta commit that made it visible;
- `txstream_etl_rows_total{table}`: rows landed per table (a mirror counts each change);
- `txstream_etl_quarantined_total{table,reason}`: rows sent to quarantine instead, by the
  table they were bound for and the rule's reason;
- `txstream_etl_micro_batch_seconds{query,stage}`: per micro-batch, the seconds of each of
  Spark's stages (`progress.py`), `triggerExecution` the whole.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

FRESHNESS = Histogram(
    "txstream_etl_freshness_seconds",
    "Seconds from a row's Kafka commit to its visibility in Delta",
    ["table"],
    buckets=(0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 120, 300, 600),
)
ROWS = Counter("txstream_etl_rows_total", "Rows landed in the warehouse", ["table"])
QUARANTINED = Counter(
    "txstream_etl_quarantined_total", "Rows quarantined instead of landed", ["table", "reason"]
)
MICRO_BATCH = Histogram(
    "txstream_etl_micro_batch_seconds",
    "Seconds of each micro-batch in each of Spark's stages (durationMs)",
    ["query", "stage"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300),
)
