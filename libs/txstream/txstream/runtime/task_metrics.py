"""A partition task's metrics: each committed group counted once, and gauges (with
warnings) for work that waits on other engines."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from txstream.engine.group import CommitGroup
from txstream.engine.hops import HopInbox
from txstream.engine.span_runner import SpanRunner
from txstream.observability import metrics

log = logging.getLogger(__name__)

# Work waiting this long for other engines is logged (then as often).
WAIT_WARN_S = 10.0


class TaskMetrics:
    def __init__(self, app: str, partition: int) -> None:
        self.app = app
        self.partition = partition
        self._labels = (app, str(partition))
        self._span_warned = 0.0
        self._admit_warned = 0.0
        self._hop_warned = 0.0

    def recovered(self, records: int, seconds: float) -> None:
        metrics.RECOVERY_SECONDS.labels(*self._labels).set(seconds)
        metrics.RECOVERED_RECORDS.labels(*self._labels).set(records)

    def committed(self, group: CommitGroup, seconds: float) -> None:
        """Metrics of a committed group: exact, since it is committed only once."""
        app, part = self._labels
        stats = group.stats
        metrics.BATCHES.labels(app, part).inc(stats.batches)
        metrics.EXECUTIONS.labels(app, part).inc(stats.executions)
        metrics.GROUP_BATCHES.labels(app).observe(stats.batches)
        metrics.GROUP_SECONDS.labels(app).observe(seconds)
        for a in group.aborts:
            metrics.ABORTS.labels(app, a.procedure, a.reason).inc()
        for (procedure, reason), n in stats.oltp_aborts.items():
            metrics.ABORTS.labels(app, procedure, reason).inc(n)
        for (stream, outcome), n in stats.stale.items():
            metrics.STALE_BATCHES.labels(app, stream, outcome).inc(n)
        for window, n in stats.slides.items():
            metrics.SLIDES.labels(app, window).inc(n)
        for _, result in group.results:
            metrics.DIRECT.labels(app, result.status).inc()
        for r in group.replies:
            if r.kind == "vote":
                metrics.PARTICIPANT.labels(app, "vote_yes" if r.ok else "vote_no").inc()
            elif r.kind == "ack" and r.detail in ("committed", "aborted"):
                metrics.PARTICIPANT.labels(app, f"decision_{r.detail}").inc()

    def spans(self, spans: SpanRunner) -> None:
        """Spanning batches queued, and the oldest one's wait for other engines' reads."""
        metrics.SPAN_QUEUED.labels(*self._labels).set(len(spans.queue))
        waiting = spans.oldest_wait()
        metrics.SPAN_WAIT_SECONDS.labels(*self._labels).set(0.0 if waiting is None else waiting[2])
        now = time.monotonic()
        if (
            waiting is not None
            and waiting[2] >= WAIT_WARN_S
            and now >= self._span_warned + WAIT_WARN_S
        ):
            self._span_warned = now
            batch_id, engines, waited = waiting
            log.warning(
                "p%d: spanning batch %d has waited %.0f s for reads from engines %s: is each "
                "up, and was the batch sent to every partition owning a key it declares?",
                self.partition, batch_id, waited, engines,
            )  # fmt: skip
        unadmitted = spans.oldest_unadmitted()
        if (
            unadmitted is not None
            and unadmitted[3] >= WAIT_WARN_S
            and now >= self._admit_warned + WAIT_WARN_S
        ):
            self._admit_warned = now
            stream, batch_id, behind, waited = unadmitted
            log.warning(
                "p%d: batch %d of spanning stream %r has waited %.0f s for streams %s to "
                "come past it here: does one producer send every spanning stream, marking "
                "its progress on each?",
                self.partition, batch_id, stream, waited, behind,
            )  # fmt: skip

    def hops(self, inboxes: Mapping[str, HopInbox]) -> None:
        """Parts of ordered hops held for other engines: gauges, and a warning naming the
        engines not heard from, since a producer that never marks its progress (or an
        engine that is down) holds them for good."""
        now = time.monotonic()
        warn = now >= self._hop_warned + WAIT_WARN_S
        for name, inbox in inboxes.items():
            labels = (*self._labels, name)
            waited = inbox.oldest_wait()
            metrics.HOP_WAITING.labels(*labels).set(len(inbox.waiting))
            metrics.HOP_WAIT_SECONDS.labels(*labels).set(waited)
            if warn and waited >= WAIT_WARN_S:
                self._hop_warned = now
                log.warning(
                    "p%d: %d parts for %s have waited up to %.0f s, the next for engines %s: "
                    "is each up, and does its producer mark its progress "
                    "(txstream produce --progress)?",
                    self.partition, len(inbox.waiting), name, waited, inbox.waiting_for(),
                )  # fmt: skip
