"""A Faust transport that reads committed data and seeks to the engines' own positions.

Stock Faust reads read_uncommitted unless its own exactly-once mode is on, and after every
rebalance it seeks to consumer-group offsets. Both are wrong for us: engines must see only
committed batches, and the input positions that count are the ones committed in the same
Kafka transaction as the engine's effects. Faust's own group-offset commits are turned
into no-ops so they can never be mistaken for progress.

Faust picks the transport by URL scheme, so `txkafka://manager:port` selects this one without
patching Faust. The aiokafka attributes set below are read only when the consumer starts,
which is after they are set; aiokafka is pinned for that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

if TYPE_CHECKING:
    from txstream_worker.task_manager import TaskManager

SCHEME = "txkafka"
# How long the broker may hold a fetch that finds no data. aiokafka sends one fetch at a time
# per broker, and leaves out of it a partition whose fetched records are still waiting to be
# taken; so while a busy input is being worked through, a fetch for only the idle inputs
# (reference data, OLTP topics) can be the one in flight, and the busy input's next records
# are not fetched until it returns. Faust's 1500 ms made that a standing 1-2 s queue under
# load; this bounds the wait to well under one group commit interval.
FETCH_MAX_WAIT_MS = 50


def task_manager(app: Any) -> TaskManager | None:
    """The engines of a `TxFaustApp`; None for any other Faust app using this transport."""
    manager: TaskManager | None = getattr(app, "txstream_tasks", None)
    return manager


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = "read_committed"
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        # Faust's own assignor keeps co-partitioned topics together, so every input of
        # partition p reaches the one engine (and transactional.id) of partition p. Faust
        # uses round-robin unless the app has changelog tables, and ours has none.
        consumer._partition_assignment_strategy = [self.app.assignor]
        return consumer

    def highwater(self, tp: TP) -> int:
        offset: int = self._ensure_consumer().last_stable_offset(tp)
        return offset

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        consumer = self._ensure_consumer()
        return {tp: consumer.last_stable_offset(tp) for tp in partitions}


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
            positions.update(stored)
        return positions

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        return True


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer


drivers.TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"
