"""The partition engines' Prometheus metrics, shared by every process that runs engines.

Counts that describe committed work (batches, aborts, 2PC votes and decisions, group
commits) are recorded from the group after Kafka accepted it, so a replay after a crash
never counts twice. Latencies and window slides are recorded as they happen.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)

TE_SECONDS = Histogram(
    "txstream_te_seconds",
    "Transaction execution latency per procedure",
    ["app", "procedure"],
    buckets=_LATENCY_BUCKETS,
)
BATCHES = Counter(
    "txstream_batches_committed_total", "Input batches committed", ["app", "partition"]
)
EXECUTIONS = Counter(
    "txstream_executions_committed_total",
    "TEs and OLTP transactions committed, aborts included",
    ["app", "partition"],
)
ABORTS = Counter(
    "txstream_aborts_total",
    "Aborted TEs and OLTP fragments, and rejected input records, by procedure and reason",
    ["app", "procedure", "reason"],
)
GROUP_BATCHES = Histogram(
    "txstream_group_commit_batches",
    "Input batches per group commit",
    ["app"],
    buckets=(1, 2, 5, 10, 50, 100, 500, 1000, 5000),
)
GROUP_SECONDS = Histogram(
    "txstream_group_commit_seconds",
    "Time to commit one group (Kafka transaction and RocksDB)",
    ["app"],
    buckets=_LATENCY_BUCKETS,
)
SLIDES = Counter("txstream_window_slides_total", "Window slides", ["app", "window"])
PARTICIPANT = Counter(
    "txstream_2pc_participant_total",
    "2PC at the engines: votes (yes/no) and decisions applied",
    ["app", "event"],
)
RECOVERY_SECONDS = Gauge(
    "txstream_recovery_seconds", "Time the last restore or replay took", ["app", "partition"]
)
RECOVERED_RECORDS = Gauge(
    "txstream_recovered_records", "Log records the last recovery read", ["app", "partition"]
)
INPUT_LAG = Gauge(
    "txstream_input_lag_records",
    "Committed input records not yet processed",
    ["app", "topic", "partition"],
)


def te_timer(app: str) -> Callable[[str, float], None]:
    """A recorder of TE latencies for one app, with its labelled children cached."""
    children: dict[str, Histogram] = {}

    def observe(procedure: str, seconds: float) -> None:
        child = children.get(procedure)
        if child is None:
            child = children[procedure] = TE_SECONDS.labels(app, procedure)
        child.observe(seconds)

    return observe
