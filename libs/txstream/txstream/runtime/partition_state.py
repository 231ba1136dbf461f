"""A partition's state manager: the store, its committed view, snapshots and repair.

It opens the most advanced usable base (RocksDB as it stands, or the newest snapshot ahead
of it), takes snapshots as commits accumulate, and wipes a store found damaged so the
restart rebuilds it. Like a Kafka Streams state manager, it alone touches the store's files;
restoring the store from the log is the task's (`PartitionTask`), which needs the engine.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.recovery.policy import RecoveryPolicy
from txstream.recovery.snapshots import Snapshots
from txstream.state.codec import StateCodec, table_rows
from txstream.state.committed import CommittedState
from txstream.state.store import (
    StateStore,
    StateStoreCorruption,
    StateStoreError,
    StateStoreLocked,
)

log = logging.getLogger(__name__)

STORE_LOCK_WAIT_S = 60.0


class PartitionState:
    def __init__(
        self,
        settings: Settings,
        app: str,
        partition: int,
        codec: StateCodec,
        recovery: RecoveryPolicy,
        log_name: str,
        command_log: str | None,
    ) -> None:
        """`log_name` is the recovery log ("changelog" or "cmdlog") whose offset the store
        keeps; `command_log` the topic truncated below the oldest snapshot, if logged."""
        self.settings = settings
        self.partition = partition
        self.codec = codec
        self.recovery = recovery
        self.log_name = log_name
        self.command_log = command_log
        self.dir = settings.data_dir / "engines" / app / f"p{partition}"
        self.snapshots = Snapshots(
            settings.data_dir / "snapshots" / app / f"p{partition}" / log_name,
            recovery.keep_snapshots,
        )
        self._since_snapshot = 0
        self._snapshot_at = time.monotonic()

    def open(self) -> CommittedState:
        """Open the store (`self.store`) and its committed view (`self.state`)."""
        self.store = self._open_store()
        self.state = CommittedState(self.store, self.codec, self.log_name)
        return self.state

    def tables(self) -> dict[str, Any]:
        """The committed state in RocksDB as plain tables: {table: {key: row}}."""
        return table_rows(self.codec, dict(self.store.scan(b"")))

    def committed(self, batches: int) -> None:
        """A group of `batches` is in the store: take a snapshot if one is due."""
        self._since_snapshot += batches
        every, interval = self.recovery.snapshot_every_batches, self.recovery.snapshot_interval_s
        if (every and self._since_snapshot >= every) or (
            interval and time.monotonic() - self._snapshot_at >= interval
        ):
            self.snapshot()

    def snapshot(self) -> None:
        """Checkpoint committed state; then the command log below the oldest kept snapshot
        is no longer needed, and is truncated. A failed snapshot (a full disk, say) costs
        only a longer recovery, so it is logged and the engine goes on."""
        self._since_snapshot, self._snapshot_at = 0, time.monotonic()
        try:
            self.snapshots.take(self.store, self.state.log_offset())
        except (StateStoreError, OSError) as e:
            log.error("snapshot of partition %d failed: %s", self.partition, e)
            return
        oldest = self.snapshots.oldest_offset()
        if self.command_log is not None and oldest is not None:
            TopicAdmin(self.settings).delete_records(self.command_log, self.partition, oldest)

    def drop(self) -> None:
        """Damage found while running: wipe the store, so the restart that follows this
        failure rebuilds it from a snapshot and the log instead of tripping on it again."""
        log.error("state store of partition %d is damaged; wiping it for a rebuild", self.partition)
        with contextlib.suppress(StateStoreError):
            self.store.close()
        StateStore.wipe(self.dir)

    def close(self) -> None:
        self.store.close()

    def _open_when_free(self) -> StateStore:
        """Open the store, waiting (bounded) while the engine that had this partition
        before a rebalance, in another worker on this host, has not closed it yet."""
        retrying = Retrying(
            retry=retry_if_exception_type(StateStoreLocked),
            stop=stop_after_delay(STORE_LOCK_WAIT_S),
            wait=wait_exponential(multiplier=0.05, max=1.0),
            before_sleep=lambda s: log.info("p%d: store still locked, waiting", self.partition),
            reraise=True,
        )
        return retrying(StateStore.open, self.dir)

    def _open_store(self) -> StateStore:
        """The most advanced usable base: RocksDB as it stands, or the newest snapshot ahead
        of it. A corrupt store or snapshot is only a cache of the log: drop it and go on."""
        try:
            store = self._open_when_free()
        except StateStoreCorruption as e:
            log.warning("state store unusable (%s); rebuilding it", e)
            StateStore.wipe(self.dir)
            store = StateStore.open(self.dir)
        reached = store.offset(self.log_name)
        for offset, path in self.snapshots.newest_first():
            if reached is not None and reached >= offset:
                break
            store.close()
            try:
                StateStore.restore(path, self.dir)
                store = StateStore.open(self.dir)
            except StateStoreError as e:
                log.warning("snapshot %s unusable (%s); trying an older one", path, e)
                StateStore.wipe(self.dir)
                store = StateStore.open(self.dir)
                continue
            log.info("partition %d starts from snapshot %s", self.partition, path)
            break
        return store
