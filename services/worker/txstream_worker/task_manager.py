"""The partition tasks of one worker, opened and closed as Faust assigns partitions.

Faust decides which partitions this worker owns (its consumer group, its co-partitioning
assignor); the records themselves never pass through Faust. Each task (a `PartitionTask`)
has one thread, in which it opens and then runs its own delivery loop: a `TaskPump`, whose
confluent-kafka consumer reads the task's inputs in bulk, read_committed, from the task's
own positions, and which commits each group when it is due. So one task's commit never
stalls another's processing, and nothing of a task is touched from two threads at once.

A rebalance pauses every loop (each commits what it holds first); the assignment that
follows closes the tasks really lost and resumes the others where they stopped.

A failed commit or open is not retried here: the process exits and its supervisor starts a
fresh one, which restores from what Kafka committed (crash-only recovery).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, TypeVar

from faust.types import TP

from txstream.commit.policy import OLTP_GROUP_MS, CommitPolicy
from txstream.config import Settings
from txstream.model.app import App
from txstream.observability import metrics
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.direct_calls import TaskCalls
from txstream.runtime.inputs import Inputs
from txstream.runtime.pump import TaskPump
from txstream.runtime.reads import TaskReads
from txstream.runtime.task import PartitionTask

log = logging.getLogger(__name__)

T = TypeVar("T")

EXIT_ENGINE_FAILURE = 70
LAG_INTERVAL_S = 1.0


class _ManagedTask:
    """A task, its thread, and the delivery loop that runs in it while not paused."""

    def __init__(self, task: PartitionTask, wait_s: float) -> None:
        self.task = task
        self.wait_s = wait_s
        self.thread = ThreadPoolExecutor(1, thread_name_prefix=f"task-p{task.partition}")
        self.opened: asyncio.Future[dict[str, int]] | None = None
        self.pump: TaskPump | None = None
        self.delivering: asyncio.Future[None] | None = None
        self.stop = threading.Event()

    async def call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn)

    def resume(self, positions: dict[str, int]) -> None:
        if self.delivering is not None:
            return
        self.stop.clear()
        if self.pump is None:
            self.pump = TaskPump(self.task, positions)
        self.delivering = asyncio.ensure_future(self.call(self._deliver))
        self.delivering.add_done_callback(_fail_on_error(f"delivery to p{self.task.partition}"))

    async def pause(self) -> None:
        """Stop the loop after its current step, then commit whatever the task holds."""
        if self.delivering is None:
            return
        self.stop.set()
        await asyncio.wait([self.delivering])
        self.delivering = None
        await self.call(self.task.commit)

    def _deliver(self) -> None:
        pump = self.pump
        assert pump is not None
        app, part = self.task.app.name, str(self.task.partition)
        lag_at = 0.0
        while not self.stop.is_set():
            pump.step(timeout_s=self.wait_s)
            if time.monotonic() - lag_at >= LAG_INTERVAL_S:
                lag_at = time.monotonic()
                for topic, lag in pump.lag().items():
                    metrics.INPUT_LAG.labels(app, topic, part).set(lag)

    def close(self) -> None:
        if self.pump is not None:
            self.pump.close()
        self.task.close()


class TaskManager:
    def __init__(
        self, app: App, settings: Settings, policy: CommitPolicy, recovery: RecoveryPolicy
    ) -> None:
        self.app = app
        self.settings = settings
        self.policy = policy
        self.recovery = recovery
        self.topics = set(Inputs.of(app).topics)
        # How long a delivery loop waits for a record: a client waits on each OLTP reply,
        # which commits at most OLTP_GROUP_MS after it is made.
        wait_ms = OLTP_GROUP_MS if app.decl.transactions else min(policy.interval_ms, 50)
        self.wait_s = max(wait_ms, 1) / 1000
        self.tasks: dict[int, _ManagedTask] = {}

    def reads_of(self, partition: int) -> TaskReads | None:
        """Any thread: where reads of `partition` are answered, if this worker holds it."""
        managed = self.tasks.get(partition)
        return None if managed is None else managed.task.reads

    def calls_of(self, partition: int) -> TaskCalls | None:
        """Any thread: where direct transactions on `partition` are sent, if this worker
        holds it."""
        managed = self.tasks.get(partition)
        return None if managed is None else managed.task.calls

    def serves(self, topic: str) -> bool:
        return topic in self.topics

    async def positions_for(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The tasks' own next offsets, for Faust's (paused) consumer; each task's delivery
        loop resumes from where it stopped, or from these positions if it just opened."""
        positions: dict[TP, int] = {}
        by_partition: dict[int, dict[str, int]] = {}  # once per task, for all its topics
        for tp in tps:
            if tp.partition not in by_partition:
                managed = await self._opened(tp.partition)
                by_partition[tp.partition] = managed.task.positions()
                managed.resume(by_partition[tp.partition])
            positions[tp] = by_partition[tp.partition][tp.topic]
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
        """Pause every delivery loop, each committing what its task holds.

        Tasks stay open, since the eager protocol revokes every partition on every
        rebalance; the next assignment closes the ones really lost, before another worker
        can have opened them, and resumes the rest.
        """
        for managed in list(self.tasks.values()):
            await self._pause(managed)

    async def close_all(self) -> None:
        for partition in list(self.tasks):
            await self._close(partition)

    async def _pause(self, managed: _ManagedTask) -> None:
        try:
            await managed.pause()
        except Exception:
            fail(f"commit of partition {managed.task.partition} failed")

    def _start_opening(self, partition: int) -> _ManagedTask:
        managed = self.tasks.get(partition)
        if managed is None:
            task = PartitionTask(self.app, partition, self.settings, self.policy, self.recovery)
            managed = _ManagedTask(task, self.wait_s)
            self.tasks[partition] = managed
        if managed.opened is None:
            managed.opened = asyncio.ensure_future(managed.call(managed.task.open))
            managed.opened.add_done_callback(_fail_on_error(f"opening partition {partition}"))
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
                await self._pause(managed)
                await managed.call(managed.close)
        managed.thread.shutdown(wait=False)


def _fail_on_error(what: str) -> Callable[[asyncio.Future[Any]], None]:
    def check(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.error("%s failed", what, exc_info=future.exception())
            fail(f"{what} failed")

    return check


def fail(why: str) -> NoReturn:
    """End the process at once: what Kafka committed is the state to restart from."""
    log.critical("%s; exiting so the supervisor restarts from committed state", why, exc_info=True)
    logging.shutdown()
    os._exit(EXIT_ENGINE_FAILURE)
