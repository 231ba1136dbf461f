"""When a group commit is due: after an interval, or once enough batches are pending."""

from __future__ import annotations

from dataclasses import dataclass

# A client waits on each OLTP reply: a group holding one waits at most this long.
OLTP_GROUP_MS = 10


@dataclass(frozen=True)
class CommitPolicy:
    """Group commit: commit when `interval_ms` has passed or `max_batches` are pending.

    One commit is in flight at a time, and processing goes on beside it: a group that
    comes due meanwhile keeps growing until that commit is done (up to `max_batches`), so
    under load the groups size themselves to the broker's round trips, and a short
    interval costs latency nothing and throughput little.

    While the input is backed up (a poll brought a full run of records), a group waits
    `busy_interval_ms` instead. Each commit costs the worker's Python the same fixed work
    whatever its size, so under overload a run of small commits takes that time from the
    engine, which then fills the next group more slowly still: a worker can stay in that
    state for the first half second of a burst (docs/performance-history.md, the busy
    interval). Fewer, larger commits break the loop; with no backlog the interval is
    `interval_ms`, so the latency of a worker that keeps up is unchanged. A worker on a CPU
    of its own (`worker_cpus`) did better at 120 ms (median 7,425 against 5,545 batches/s),
    but with every process anywhere 120 ms ran the 8,000-vote check at 4,640-6,701 against
    7,199-10,484 (2026-11-28), so 40 stays the default: set it with `worker_cpus`.

    `CommitPolicy.off()` commits after every input batch and the TEs it triggered.
    """

    interval_ms: int = 10
    max_batches: int = 5000
    busy_interval_ms: int = 40

    def __post_init__(self) -> None:
        if self.interval_ms < 0 or self.max_batches < 1 or self.busy_interval_ms < 0:
            raise ValueError(
                f"group commit needs interval_ms >= 0, max_batches >= 1 and "
                f"busy_interval_ms >= 0, not {self.interval_ms}, {self.max_batches} and "
                f"{self.busy_interval_ms}"
            )

    def wait_ms(self, backlog: bool) -> int:
        """How long a group may stay open: longer while the input is backed up."""
        return max(self.busy_interval_ms, self.interval_ms) if backlog else self.interval_ms

    @classmethod
    def off(cls) -> CommitPolicy:
        return cls(interval_ms=0, max_batches=1, busy_interval_ms=0)
