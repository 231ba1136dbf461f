"""The partition engines' Prometheus metrics, shared by every process that runs engines.

Counts that describe committed work (batches, aborts, 2PC votes and decisions, group
commits) are recorded from the group after Kafka accepted it, so a replay after a crash
never counts twice. Latencies and window slides are recorded as they happen.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

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
STALE_BATCHES = Counter(
    "txstream_stale_batches_total",
    "Input batches whose id was not above the last on their stream partition: exact "
    "re-sends skipped (outcome=resend), other batches dead-lettered (outcome=dead_letter)",
    ["app", "stream", "outcome"],
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
DIRECT = Counter(
    "txstream_direct_total",
    "Direct (single-partition, client to engine) transactions answered, by status",
    ["app", "status"],
)
COMMITTED_READS = Counter(
    "txstream_committed_reads_total",
    "Reads of committed state answered by the worker (point reads and read-only calls): "
    "at_once, or after_a_step of the partition's task (it was busy, or the rows waited "
    "for a commit)",
    ["app", "answered"],
)
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
SPAN_QUEUED = Gauge(
    "txstream_spanning_queued_batches",
    "Spanning batches queued in an engine (sent and waiting for reads, or for their keys)",
    ["app", "partition"],
)
SPAN_WAIT_SECONDS = Gauge(
    "txstream_spanning_oldest_wait_seconds",
    "How long the oldest started spanning batch has waited for the other engines' reads",
    ["app", "partition"],
)
HOP_WAITING = Gauge(
    "txstream_hop_waiting_parts",
    "Parts an ordered repartitioned procedure holds until no engine can send an earlier one",
    ["app", "partition", "procedure"],
)
HOP_WAIT_SECONDS = Gauge(
    "txstream_hop_oldest_wait_seconds",
    "How long the oldest part an ordered repartitioned procedure holds has waited",
    ["app", "partition", "procedure"],
)


class TeLatency(Collector):
    """`txstream_te_seconds`, a histogram per (app, procedure), counted in plain lists.

    A TE takes microseconds, and prometheus_client's `observe` (locks, exemplars) cost
    about as much again; here an observation is a bisect and two additions in the engine's
    thread, and a scrape reads a copy of the counts.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], list[float]] = {}  # buckets..., +Inf, sum

    def timer(self, app: str) -> Callable[[str, float], None]:
        """A recorder of `app`'s TE latencies: observe(procedure, seconds)."""
        mine: dict[str, list[float]] = {}
        slots = len(_LATENCY_BUCKETS)

        def observe(procedure: str, seconds: float) -> None:
            counts = mine.get(procedure)
            if counts is None:
                counts = mine[procedure] = [0.0] * (slots + 2)
                self._counts[(app, procedure)] = counts
            counts[bisect_left(_LATENCY_BUCKETS, seconds)] += 1
            counts[-1] += seconds

        return observe

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "txstream_te_seconds",
            "Transaction execution latency per procedure",
            labels=["app", "procedure"],
        )
        for labels, live in list(self._counts.items()):
            counts = list(live)
            cumulative, total = [], 0.0
            for le, n in zip(_LE_LABELS, counts, strict=False):
                total += n
                cumulative.append((le, total))
            family.add_metric(list(labels), cumulative, counts[-1])
        yield family


_LE_LABELS = (*map(str, _LATENCY_BUCKETS), "+Inf")
TE_SECONDS = TeLatency()
REGISTRY.register(TE_SECONDS)


def te_timer(app: str) -> Callable[[str, float], None]:
    """A recorder of TE latencies for one app."""
    return TE_SECONDS.timer(app)
