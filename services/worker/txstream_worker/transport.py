"""A Faust transport for group membership only: the worker's tasks read their own inputs.

Faust's consumer group and assignor decide which partitions a worker owns; each task then
reads its partitions with its own read_committed consumer from the positions committed in
the same Kafka transactions as its effects (`task_manager`). So after every rebalance this
transport seeks Faust's consumer to those positions and pauses it there, and Faust's own
group-offset commits are no-ops, never to be mistaken for progress.

Faust picks the transport by URL scheme, so `txkafka://host:port` selects this one without
patching Faust. The aiokafka attributes set below are read only when the consumer starts,
which is after they are set; aiokafka is pinned for that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiokafka.structs import TopicPartition
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

if TYPE_CHECKING:
    from txstream_worker.task_manager import TaskManager

SCHEME = "txkafka"


def task_manager(app: Any) -> TaskManager | None:
    """The tasks of a `TxFaustApp`; None for any other Faust app using this transport."""
    manager: TaskManager | None = getattr(app, "txstream_tasks", None)
    return manager


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"
        # Faust's own assignor keeps co-partitioned topics together, so every input of
        # partition p reaches the one engine (and transactional.id) of partition p. Faust
        # uses round-robin unless the app has changelog tables, and ours has none.
        consumer._partition_assignment_strategy = [self.app.assignor]
        return consumer

    def pause_fetching(self, tps: set[TP]) -> None:
        self._ensure_consumer().pause(*(TopicPartition(tp.topic, tp.partition) for tp in tps))


class Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Faust calls this after every rebalance, before flow resumes."""
        manager = task_manager(self.app)
        assigned = set(self.assignment())
        ours = {tp for tp in assigned if manager is not None and manager.serves(tp.topic)}
        positions: dict[TP, int] = {}
        others = assigned - ours
        if others:
            positions.update(await super().seek_to_committed())
        if ours and manager is not None:
            stored = await manager.positions_for(ours)
            await self._thread.seek_wait(stored)
            # The tasks read these partitions with their own consumers: Faust's fetches
            # nothing of them, at its own level and at aiokafka's (a new assignment
            # unpauses everything, so this runs after every rebalance).
            self.pause_partitions(ours)
            assert isinstance(self._thread, _ConsumerThread)
            self._thread.pause_fetching(ours)
            positions.update(stored)
        return positions

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        return True


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer


drivers.TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"
