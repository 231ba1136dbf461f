"""Topic names of one app: streams, changelog, command log, aborts and commit notices."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from txstream.kafka.admin import TopicAdmin, TopicExistsError


@dataclass(frozen=True)
class AppTopics:
    app: str

    def stream(self, name: str) -> str:
        return f"{self.app}.{name}"

    @property
    def changelog(self) -> str:
        """Compacted; partition p holds engine p's state. RocksDB is a cache of it."""
        return f"{self.app}.changelog"

    @property
    def command_log(self) -> str:
        """Strong or weak recovery: one record per group commit; truncated after snapshots."""
        return f"{self.app}.cmdlog"

    @property
    def aborts(self) -> str:
        return f"{self.app}.aborts"

    @property
    def commits(self) -> str:
        """Commit notices: what each engine has committed, for waiting clients and gating."""
        return f"{self.app}.commits"

    def transactional_id(self, partition: int) -> str:
        """Stable per partition engine, so a restarted engine fences its zombie."""
        return f"txstream-{self.app}-engine-{partition}"


def ensure_topics(
    admin: TopicAdmin, topics: AppTopics, streams: Iterable[str], partitions: int
) -> None:
    """Create every topic the app needs that does not exist yet (idempotent)."""
    compacted = {"cleanup.policy": "compact"}
    wanted: dict[str, dict[str, str]] = {topics.stream(s): {} for s in streams}
    wanted[topics.changelog] = compacted
    wanted[topics.command_log] = {"retention.ms": "-1", "retention.bytes": "-1"}
    wanted[topics.aborts] = {}
    wanted[topics.commits] = {}
    existing = set(admin.list_topics())
    for name, config in wanted.items():
        if name in existing:
            continue
        with contextlib.suppress(TopicExistsError):  # made meanwhile by another worker: fine
            admin.create_topic(name, partitions=partitions, config=config)
