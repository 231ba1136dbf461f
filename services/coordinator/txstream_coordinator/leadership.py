"""Which of an app's coordinator processes is active: the group member holding `oltp.in[0]`.

Each coordinator subscribes to the requests topic (one partition) in the coordinators'
group. The member the group assigns the partition is the active one; the
others stand by. A member that dies stops heartbeating and, one session timeout later, the
group gives the partition to a standby. Cooperative-sticky assignment leaves the partition
where it is when a standby joins or leaves, so starting a standby never moves the role.

This consumer only holds the partition: it is paused, and the active coordinator reads the
records with its own assigned consumer, as before. The role alone does not fence: a member
the group has dropped may still commit, until the new active coordinator's
`init_transactions` fences its producer (the coordinators share one transactional.id).
Whatever it committed by then is in the log that the new one reads next, its input
positions included (`runtime`).
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import common_config


class Leadership:
    def __init__(self, settings: Settings, group_id: str, topic: str) -> None:
        session_ms = int(settings.coordinator_session_timeout_s * 1000)
        self._held = False
        self._consumer = Consumer(
            {
                **common_config(settings),
                "group.id": group_id,
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": session_ms,
                # a standby hears of the rebalance at its next heartbeat: keep them frequent
                "heartbeat.interval.ms": max(100, session_ms // 6),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        self._consumer.subscribe(
            [topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked
        )

    def held(self, wait_s: float = 0.0) -> bool:
        """Whether this process is to be active, after serving the group's callbacks (which
        it must do regularly to stay in the group)."""
        self._consumer.poll(wait_s)  # the partition is paused: no record comes back
        return self._held

    def close(self) -> None:
        """Leave the group, so a standby is assigned at once rather than a session later."""
        self._consumer.close()

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)
        if partitions:
            consumer.pause(partitions)
            self._held = True

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if partitions:
            self._held = False
