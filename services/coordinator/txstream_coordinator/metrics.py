"""The coordinator's Prometheus metrics: every outcome it reports is counted."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

OUTCOMES = Counter(
    "txstream_coordinator_outcomes_total",
    "Transactions and reads by outcome (single_committed, 2pc_committed, "
    "2pc_aborted_<reason>, reads, read_timeout, failed, refused_reply_to, undecodable, ...)",
    ["outcome"],
)
IN_DOUBT = Gauge("txstream_coordinator_in_doubt", "2PC transactions begun and not yet ended")
RECOVERY_SECONDS = Gauge(
    "txstream_coordinator_recovery_seconds", "Time to replay the log and resolve what was in doubt"
)
ACTIVE = Gauge("txstream_coordinator_active", "1 while this process is the active coordinator")
LOG_START = Gauge(
    "txstream_coordinator_log_start_offset", "The coordinator log's first offset, after truncation"
)
TAKEOVER_RETRIES = Counter(
    "txstream_coordinator_takeover_retries_total",
    "Take-overs that a broker error cut short and the next step tried again",
)
