"""RocksDB as the commit protocol sees it, in memory: with the write-ahead log off.

The real store (`state.store`) applies each group as one write batch, data and log offset
together, and a crash loses whatever the memtable held since the last flush, but never half
of an apply. So here an apply lands in `live`, a flush (at random, or on close) copies
`live` to `durable`, and a crash puts `durable` back: the state after a crash is the state
of some earlier apply, with the log offset it reached.

`LaggingState` is the same at the engine's level (a base of decoded rows, for simulations
that drive engines without a task): each applied group is also its changelog record, and
after a crash the state is behind that changelog until `restore` replays the rest.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.support.simulation.kafka import NO_CRASH
from txstream.engine.group import CommitGroup
from txstream.engine.windows import WindowState
from txstream.engine.writeset import TOMBSTONE
from txstream.model.declarations import Key, Record
from txstream.state.store import StateStore
from txstream.testing import MemoryState

# One changelog record: a committed group's writes, rows copied (TOMBSTONE: deleted).
Writes = tuple[dict[str, dict[Key, Record]], dict[str, WindowState]]


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


class LaggingState(MemoryState):
    """An engine's committed state kept as RocksDB without a WAL keeps it: every group
    applied is appended to the changelog and lands in the live rows; a flush (with chance
    `flush_chance` after each apply) makes the rows durable; a crash goes back to the last
    flush, and `restore` replays the changelog past it, as `recovery.changelog.restore`
    does. Between the two the state is behind its changelog, as after every SIGKILL."""

    def __init__(self, rng: random.Random | None = None, flush_chance: float = 0.0) -> None:
        super().__init__()
        self.rng = rng or random.Random(0)
        self.flush_chance = flush_chance
        self.changelog: list[Writes] = []
        self.applied = 0  # changelog records the live rows hold
        self._durable: tuple[dict[str, dict[Key, Record]], dict[str, WindowState], int] = (
            {},
            {},
            0,
        )

    def apply(self, group: CommitGroup) -> None:
        tables = {t: {k: v if v is TOMBSTONE else copy.deepcopy(v) for k, v in rows.items()}
                  for t, rows in group.ws.tables.items()}  # fmt: skip
        self.changelog.append((tables, dict(group.ws.windows)))
        self._land(self.changelog[-1])
        self.applied = len(self.changelog)
        if self.rng.random() < self.flush_chance:
            self.flush()

    def flush(self) -> None:
        self._durable = (copy.deepcopy(self.tables), dict(self.windows), self.applied)

    def crash(self) -> None:
        """The process died: the rows as of the last flush, behind the changelog."""
        tables, windows, applied = self._durable
        self.tables, self.windows, self.applied = copy.deepcopy(tables), dict(windows), applied

    @property
    def behind(self) -> int:
        """Changelog records not in the rows yet."""
        return len(self.changelog) - self.applied

    def restore(self) -> int:
        """Replay the changelog past the rows; the records replayed."""
        missing = self.changelog[self.applied :]
        for writes in missing:
            self._land(writes)
        self.applied = len(self.changelog)
        return len(missing)

    def _land(self, writes: Writes) -> None:
        tables, windows = writes
        for table, rows in tables.items():
            target = self.tables.setdefault(table, {})
            for k, v in rows.items():
                if v is TOMBSTONE:
                    target.pop(k, None)
                else:
                    target[k] = copy.deepcopy(v)
        self.windows.update(windows)
