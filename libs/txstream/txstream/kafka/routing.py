"""Which partition engine owns a key: the one rule for everything that places data by key.

The sequencer places a border-stream event by its key field with it, the producers place a
spanning batch on the engines owning its declared keys (`span_places`, as the engines
compute who takes part), the coordinator and the OLTP clients send a fragment or query to
the engine it names, and test drivers and apps use
it to pick keys on a given partition. If any of them hashed differently (say `str(value)`,
or the Kafka key bytes), an OLTP transaction would look for state on an engine that never
saw it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import lru_cache

from txstream.engine.spanning import SpanPlan
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Key, Record
from txstream.oltp.messages import key_of
from txstream.state.keys import encode_key

# The Kafka key of a routed spanning batch's copy on its lowest participant: the one copy a
# reader of the whole stream takes (the warehouse); partition 0 holds one of every batch
# only when batches are broadcast.
LEADER_KEY = b"txstream-leader"


def partition_of(key: Key, partitions: int) -> int:
    """crc32 of the key's order-preserving encoding (`state.keys.encode_key`), modulo the
    partition count: stable across processes and Python versions (unlike `hash`), and the
    int 7 and the string "7" are different keys. Raises TypeError or ValueError, naming the
    part, for a key part that is no key type (a float, a bool, an int beyond 64 bits)."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    return zlib.crc32(encode_key(key)) % partitions


@lru_cache(maxsize=65_536)
def fragment_partition(key: str, partitions: int) -> int:
    """`partition_of` a key as a fragment carries it (JSON, `oltp.messages.key_json`),
    remembered: a client places every call by its keys, and hot keys recur."""
    return partition_of(key_of(key), partitions)


def span_places(
    dataflow: Dataflow, stream: str, tuples: Sequence[Record], partitions: int
) -> list[int]:
    """The partitions a batch of spanning `stream` is written to: those owning a key its
    tuples declare (`touches`), which are the engines that run it; partition 0 for a batch
    declaring none (it still runs there, and may emit). Whatever `touches` raises comes
    through: the batch cannot be placed."""
    (proc,) = dataflow.consumers[stream]
    touches = dataflow.touches(proc.name)
    if touches is None:
        raise ValueError(f"stream {stream!r} is not a spanning procedure's input")
    plan = SpanPlan.of(touches, tuples, lambda key: partition_of(key, partitions))
    return sorted(plan.participants)


class RoutedSends:
    """One Kafka transaction's routed spanning batches on one topic of `partitions`: where
    each copy goes and under which key, and the progress marks that end the transaction.

    A batch goes to its participants (`span_places`), the copy on the lowest keyed
    `LEADER_KEY` (the one a reader of the whole stream takes). Each partition that did not
    get the transaction's last batch id is then sent a progress mark of that id, so its
    engine knows no batch up to it is still to come (`engine.hops.PROGRESS`)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._last: dict[int, int] = {}  # partition -> the last batch id sent to it

    def copies(self, batch_id: int, places: Sequence[int]) -> list[tuple[int, bytes | None]]:
        """Each partition batch `batch_id` is written to, with its copy's Kafka key."""
        self._last.update(dict.fromkeys(places, batch_id))
        return [(p, LEADER_KEY if i == 0 else None) for i, p in enumerate(places)]

    @property
    def top(self) -> int | None:
        """The last batch id sent in the transaction, if any."""
        return max(self._last.values(), default=None)

    def behind(self, top: int) -> list[int]:
        """The partitions to send a progress mark of `top`: those that did not get it."""
        return [p for p in range(self.partitions) if self._last.get(p, 0) < top]

    def clear(self) -> None:
        """The transaction is over: the next starts with nothing sent."""
        self._last.clear()
