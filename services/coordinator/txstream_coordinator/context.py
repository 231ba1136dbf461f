"""What every part of the coordinator shares: the number of partitions, the app's topics,
how often an unanswered message is sent again, the current epoch, and the outcome counts
(each also passed to `on_count`, which the runtime turns into metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from txstream.kafka.topics import AppTopics


@dataclass
class Context:
    partitions: int
    topics: AppTopics
    resend_s: float  # an unacknowledged decision or unanswered cut read goes again this often
    on_count: Callable[[str], None]
    epoch: int = 0  # taken anew at each start; every record this incarnation writes carries it
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.on_count(what)
