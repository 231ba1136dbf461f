"""One partition engine wired to Kafka and RocksDB: the unit a worker runs.

Like a Kafka Streams StreamTask, it owns one transactional producer, one state store and
one engine. Opening it fences any zombie, restores state from the changelog, and yields the
input positions to seek to; after that it is fed input records and told when to commit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from txstream.app import App
from txstream.commit.committed_state import CommittedState
from txstream.commit.committer import GroupCommitter
from txstream.commit.restore import restore
from txstream.commit.state_codec import StateCodec
from txstream.commit.topics import AppTopics
from txstream.config import Settings
from txstream.engine.executor import PartitionEngine, position_key
from txstream.kafka.clients import transactional_producer_config
from txstream.schemas.codec import BatchCodec, BatchDecodeError
from txstream.schemas.registry import SchemaRegistry
from txstream.state.store import StateStore, StateStoreCorruption

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitPolicy:
    """Group commit: commit when `interval_ms` has passed or `max_batches` are pending."""

    interval_ms: int = 100
    max_batches: int = 5000


class EngineTask:
    def __init__(
        self,
        app: App,
        partition: int,
        settings: Settings,
        policy: CommitPolicy = CommitPolicy(),
    ) -> None:
        self.app = app
        self.partition = partition
        self.settings = settings
        self.policy = policy
        self.topics = AppTopics(app.name)
        self.dataflow = app.dataflow()
        registry = SchemaRegistry(settings.schema_dir)
        self.codec = StateCodec(self.dataflow, registry)
        self.batch_codecs = {
            s.name: BatchCodec(registry.get(s.schema)) for s in self.dataflow.decl.streams.values()
        }
        self.stream_of_topic = {self.topics.stream(s): s for s in self.dataflow.border_streams}
        self._abort_schema = registry.get("txstream.AbortRecord")
        self._notice_schema = registry.get("txstream.CommitNotice")
        self._group_started = 0.0

    @property
    def state_dir(self) -> Path:
        return self.settings.data_dir / "engines" / self.app.name / f"p{self.partition}"

    def open(self) -> dict[str, int]:
        """Fence, restore, and return {input topic: next offset} for this partition."""
        self.producer = Producer(
            {
                **transactional_producer_config(
                    self.settings, self.topics.transactional_id(self.partition)
                ),
                "linger.ms": 5,
                "queue.buffering.max.messages": 500_000,
            }
        )
        self.producer.init_transactions(60)
        self.store = self._open_store()
        self.state = CommittedState(self.store, self.codec)
        started = time.monotonic()
        n = restore(self.state, self.settings, self.topics.changelog, self.partition)
        log.info("restored %d changelog records in %.2fs", n, time.monotonic() - started)
        self.engine = PartitionEngine(self.dataflow, self.state, self.partition, self.app.params)
        self.committer = GroupCommitter(
            self.producer,
            self.topics,
            self.partition,
            self.codec,
            self.state,
            self.batch_codecs,
            self._abort_schema,
            self._notice_schema,
        )
        self._next_offsets = self.positions()
        return dict(self._next_offsets)

    def positions(self) -> dict[str, int]:
        """{input topic: next offset to read}, as of the last processed record."""
        return {
            topic: self.engine.sys_value(position_key(topic, self.partition)) or 0
            for topic in self.stream_of_topic
        }

    def handle(self, topic: str, offset: int, value: bytes | None) -> None:
        """Process one input record; a record before the current position is a redelivery."""
        if offset < self._next_offsets[topic]:
            return
        self._next_offsets[topic] = offset + 1
        stream = self.stream_of_topic[topic]
        source = (topic, self.partition, offset)
        if not self.engine.group.ws.tables and not self.engine.group.outputs:
            self._group_started = time.monotonic()
        try:
            if value is None:
                raise BatchDecodeError("empty record value")
            batch = self.batch_codecs[stream].decode(value)
        except BatchDecodeError as e:
            self.engine.reject(stream, source, "undecodable", str(e))
            return
        self.engine.process(stream, batch.batch_id, batch.tuples, source)

    def commit_due(self) -> bool:
        group = self.engine.group
        if not group.ws.tables:
            return False
        elapsed_ms = (time.monotonic() - self._group_started) * 1000
        return group.batches >= self.policy.max_batches or elapsed_ms >= self.policy.interval_ms

    def commit(self) -> dict[str, Any]:
        """Commit the pending group, if any; returns its counts for metrics and progress."""
        group = self.engine.take_group()
        if not group.ws.tables:
            return {"batches": 0}
        self.committer.commit(group)
        return {"batches": group.batches, "aborts": len(group.aborts), "last": group.last_batch_ids}

    def close(self) -> None:
        self.store.close()
        self.producer.flush(5)

    def _open_store(self) -> StateStore:
        """A corrupt store is only a cache: wipe it and rebuild from the changelog."""
        try:
            return StateStore.open(self.state_dir)
        except StateStoreCorruption as e:
            log.warning("state store unusable (%s); rebuilding from the changelog", e)
            StateStore.wipe(self.state_dir)
            return StateStore.open(self.state_dir)
