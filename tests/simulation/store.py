"""RocksDB as the commit protocol sees it, in memory: with the write-ahead log off.

The real store (`state.store`) applies each group as one write batch, data and log offset
together, and a crash loses whatever the memtable held since the last flush, but never half
of an apply. So here an apply lands in `live`, a flush (at random, or on close) copies
`live` to `durable`, and a crash puts `durable` back: the state after a crash is the state
of some earlier apply, with the log offset it reached.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.simulation.kafka import NO_CRASH
from txstream.state.store import StateStore


class MemoryStore(StateStore):
    def __init__(self, rng: random.Random, flush_chance: float) -> None:
        # The real store's state is a RocksDB handle; this one's is two dicts.
        self._path = Path("<memory>")
        self._closed = False
        self.rng = rng
        self.flush_chance = flush_chance
        self.plan = NO_CRASH
        self.live: dict[bytes, bytes] = {}
        self.offsets: dict[str, int] = {}
        self.durable: tuple[dict[bytes, bytes], dict[str, int]] = ({}, {})

    def crash(self) -> None:
        """The process died: back to the last flush."""
        self.live, self.offsets = dict(self.durable[0]), dict(self.durable[1])

    def lose(self) -> None:
        """A lost disk: nothing left, so recovery must read the whole changelog."""
        self.live, self.offsets, self.durable = {}, {}, ({}, {})

    def flush(self) -> None:
        self.durable = (dict(self.live), dict(self.offsets))

    def close(self) -> None:
        self.flush()

    def get(self, key: bytes) -> bytes | None:
        return self.live.get(key)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(k for k in self.live if k.startswith(prefix)):
            yield key, self.live[key]

    def apply(self, writes: Mapping[bytes, bytes | None], offsets: Mapping[str, int]) -> None:
        self.plan.reached("apply")
        for key, value in writes.items():
            if value is None:
                self.live.pop(key, None)
            else:
                self.live[key] = value
        self.offsets.update(offsets)
        if self.rng.random() < self.flush_chance:
            self.flush()
        self.plan.reached("applied")

    def offset(self, name: str) -> int | None:
        return self.offsets.get(name)
