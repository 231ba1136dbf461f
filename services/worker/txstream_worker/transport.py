"""A Faust transport for group membership only: the worker's tasks read their own inputs.

Faust's consumer group and co-partitioning assignor decide which partitions a worker owns;
each task then reads its partitions with its own read_committed consumer, from the positions
committed in the same Kafka transactions as its effects (`task_manager`). So Faust's
consumer never hands out a record of them: after every rebalance this transport seeks it to
those positions and pauses it there, and it never commits consumer-group offsets, which
could be mistaken for progress.

Faust picks the transport by URL scheme, from its transport registry, so
`txkafka://host:port` selects this one. It overrides only public methods of Faust's aiokafka
consumer; the one step that needs more is `pause_fetching` (docs/worker-faust.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from aiokafka.structs import TopicPartition
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.transports import TPorTopicSet

if TYPE_CHECKING:
    from txstream_worker.task_manager import TaskManager

SCHEME = "txkafka"


def task_manager(app: Any) -> TaskManager | None:
    """The tasks of a `TxFaustApp`; None for any other Faust app using this transport."""
    manager: TaskManager | None = getattr(app, "txstream_tasks", None)
    return manager


async def pause_fetching(consumer: faust_aiokafka.Consumer, tps: Iterable[TP]) -> None:
    """Pause `tps` in the aiokafka consumer under Faust's, so it stops fetching them too.

    The one private access of the worker: Faust's `pause_partitions` only stops handing out
    records, and Faust offers no public way to its aiokafka consumer (docs/worker-faust.md).
    """
    thread = consumer._thread
    partitions = [TopicPartition(tp.topic, tp.partition) for tp in tps]

    async def pause() -> None:  # in the consumer's own thread and event loop
        thread._ensure_consumer().pause(*partitions)

    await thread.call_thread(pause)


class Consumer(faust_aiokafka.Consumer):
    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Faust calls this after every rebalance: after it resumed every assigned partition,
        before records flow again."""
        manager = task_manager(self.app)
        assigned = set(self.assignment())
        ours = {tp for tp in assigned if manager is not None and manager.serves(tp.topic)}
        positions: dict[TP, int] = {}
        others = assigned - ours
        if others:
            positions.update(await super().seek_to_committed())
        if ours and manager is not None:
            stored = await manager.positions_for(ours)
            await self.seek_wait(stored)
            # The tasks read these partitions with their own consumers: Faust hands out none
            # of their records, and its aiokafka consumer fetches none (Faust has just
            # resumed them all, so this runs after every rebalance).
            self.pause_partitions(ours)
            await pause_fetching(self, ours)
            positions.update(stored)
        return positions

    async def commit(
        self, topics: TPorTopicSet | None = None, start_new_transaction: bool = True
    ) -> bool:
        """Never: the tasks' own transactions are the only record of input progress."""
        return False


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer


drivers.TRANSPORTS.aliases[SCHEME] = f"{__name__}:Transport"
