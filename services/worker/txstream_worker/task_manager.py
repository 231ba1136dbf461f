"""The partition tasks of one worker, opened and closed as Faust assigns partitions.

Each task (a `PartitionTask`) has one lock and one thread. The lock serializes the three
callers that touch a task (its agents, the idle-commit timer and the rebalance handler):
a group must be committed and applied to RocksDB before the next batch reads state. The
thread runs the blocking calls (fencing, restore, commit) off the event loop, so one
task's commit does not stall the others.

A failed commit or open is not retried here: the process exits and its supervisor starts a
fresh one, which restores from what Kafka committed (crash-only recovery).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from faust.types import TP

from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.model.app import App
from txstream.observability import metrics
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.inputs import Inputs
from txstream.runtime.task import PartitionTask

log = logging.getLogger(__name__)

T = TypeVar("T")

EXIT_ENGINE_FAILURE = 70


class _ManagedTask:
    def __init__(self, task: PartitionTask) -> None:
        self.task = task
        self.lock = asyncio.Lock()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"task-p{task.partition}")
        self.opened: asyncio.Future[dict[str, int]] | None = None

    async def call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn)


class TaskManager:
    def __init__(
        self, app: App, settings: Settings, policy: CommitPolicy, recovery: RecoveryPolicy
    ) -> None:
        self.app = app
        self.settings = settings
        self.policy = policy
        self.recovery = recovery
        self.topics = set(Inputs.of(app).topics)
        self.tasks: dict[int, _ManagedTask] = {}

    def serves(self, topic: str) -> bool:
        return topic in self.topics

    async def positions_for(self, tps: Iterable[TP]) -> dict[TP, int]:
        """Committed next offsets, from the tasks' own state, for Faust to seek to."""
        positions: dict[TP, int] = {}
        rewound: dict[int, dict[str, int]] = {}  # once per task, for all its topics
        for tp in tps:
            if tp.partition not in rewound:
                managed = await self._opened(tp.partition)
                rewound[tp.partition] = managed.task.rewind()
            positions[tp] = rewound[tp.partition][tp.topic]
            log.info("resuming %s partition %d at offset %d", tp.topic, tp.partition, positions[tp])
        return positions

    async def on_assigned(self, assigned: Iterable[TP]) -> None:
        mine = {tp.partition for tp in assigned if self.serves(tp.topic)}
        for partition in set(self.tasks) - mine:
            await self._close(partition)
        for partition in mine:
            self._start_opening(partition)
        log.info("serving partitions %s of %s", sorted(mine), self.app.name)

    async def on_revoked(self) -> None:
        """Faust has stopped the flow and drained in-flight events: commit everything.

        Engines stay open, since the eager protocol revokes every partition on every
        rebalance; the next assignment closes the ones really lost. Faust then seeks, and
        a task's group must be empty by then or batches would be delivered twice.
        """
        await self.commit_all(force=True)

    async def process(self, partition: int, records: list[tuple[str, int, bytes | None]]) -> None:
        """Run a delivered run of records through the task, committing whenever due."""
        managed = await self._opened(partition)
        async with managed.lock:
            for _ in managed.task.run(records):
                await self._commit(managed)

    async def commit_all(self, force: bool = False) -> None:
        for managed in list(self.tasks.values()):
            if managed.opened is None or not managed.opened.done():
                continue
            async with managed.lock:
                managed.task.tick()
                if force or managed.task.commit_due(end_of_run=True):
                    await self._commit(managed)

    async def measure_lag(self, highwater: Callable[[TP], int | None]) -> None:
        """Committed input records not yet processed, per input topic partition."""
        for partition, managed in list(self.tasks.items()):
            if managed.opened is None or not managed.opened.done():
                continue
            async with managed.lock:
                positions = managed.task.positions()
            for topic, position in positions.items():
                end = highwater(TP(topic, partition))
                if end is not None:
                    metrics.INPUT_LAG.labels(self.app.name, topic, str(partition)).set(
                        max(0, end - position)
                    )

    async def close_all(self) -> None:
        for partition in list(self.tasks):
            await self._close(partition)

    async def _commit(self, managed: _ManagedTask) -> None:
        try:
            await managed.call(managed.task.commit)
        except Exception:
            fail(f"commit of partition {managed.task.partition} failed")

    def _start_opening(self, partition: int) -> _ManagedTask:
        managed = self.tasks.get(partition)
        if managed is None:
            task = PartitionTask(self.app, partition, self.settings, self.policy, self.recovery)
            managed = _ManagedTask(task)
            self.tasks[partition] = managed
        if managed.opened is None:
            managed.opened = asyncio.ensure_future(managed.call(managed.task.open))
            managed.opened.add_done_callback(_fail_on_error(partition))
        return managed

    async def _opened(self, partition: int) -> _ManagedTask:
        managed = self._start_opening(partition)
        assert managed.opened is not None
        # Shielded: Faust cancels a seek when a new rebalance starts, and a cancelled
        # open would leave its store open (and locked) in a thread nobody closes.
        await asyncio.shield(managed.opened)
        return managed

    async def _close(self, partition: int) -> None:
        """Commit and close; a task still opening is closed once open, or its store
        stays locked and the worker that now owns the partition cannot open it."""
        managed = self.tasks.pop(partition)
        if managed.opened is not None:
            await asyncio.wait([managed.opened])
            if managed.opened.exception() is None:
                async with managed.lock:
                    await self._commit(managed)
                    await managed.call(managed.task.close)
        managed.thread.shutdown(wait=False)


def _fail_on_error(partition: int) -> Callable[[asyncio.Future[Any]], None]:
    def check(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error("opening partition %d failed", partition, exc_info=future.exception())
            fail(f"could not open partition {partition}")

    return check


def fail(why: str) -> None:
    """End the process at once: what Kafka committed is the state to restart from."""
    log.critical("%s; exiting so the supervisor restarts from committed state", why, exc_info=True)
    logging.shutdown()
    os._exit(EXIT_ENGINE_FAILURE)
