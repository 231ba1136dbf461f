"""What the apps have committed, from their commit notices: the sequencer's admission gate.

Where graph order or a nested transaction spans partition engines, batch b+1 may enter only
after batch b has committed through the whole group; the engines announce each group commit
on `<app>.commits`, so following that topic is enough.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry


class CommitGate:
    def __init__(self, settings: Settings, notices: dict[str, list[int]]) -> None:
        """`notices`: each app's commit-notice topic partitions, to follow from the start."""
        self.schema = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")
        self.committed: dict[tuple[str, str, int], int] = {}
        conf = read_committed_consumer_config(settings, f"sequencer-gate-{uuid.uuid4().hex}")
        self.consumer = Consumer(conf)
        self.consumer.assign(
            [TopicPartition(t, p, 0) for t, parts in sorted(notices.items()) for p in parts]
        )

    def poll(self) -> None:
        for msg in self.consumer.consume(1000, timeout=0):
            if msg.error() is not None:
                continue
            notice: Any = decode_record(self.schema, msg.value() or b"")
            for stream, last in notice["last_batch_ids"].items():
                key = (notice["app"], stream, notice["partition"])
                self.committed[key] = max(self.committed.get(key, 0), int(last))

    def last_committed(self, app: str, stream: str, partition: int) -> int | None:
        return self.committed.get((app, stream, partition))

    def close(self) -> None:
        self.consumer.close()
