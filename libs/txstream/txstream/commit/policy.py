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

    `CommitPolicy.off()` commits after every input batch and the TEs it triggered.
    """

    interval_ms: int = 10
    max_batches: int = 5000

    def __post_init__(self) -> None:
        if self.interval_ms < 0 or self.max_batches < 1:
            raise ValueError(
                f"group commit needs interval_ms >= 0 and max_batches >= 1, "
                f"not {self.interval_ms} and {self.max_batches}"
            )

    @classmethod
    def off(cls) -> CommitPolicy:
        return cls(interval_ms=0, max_batches=1)
