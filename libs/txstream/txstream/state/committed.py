"""The committed state the engine reads through: RocksDB, decoded, with a read cache.

It changes only in `apply`, after Kafka has committed the group that produced the writes,
so the caches can never hold an uncommitted value. Each apply records how far into the
recovery log (the changelog, or the command log) the stored state reaches.

Besides rows, small scans are cached, decoded: a procedure or trigger that scans a table
on every batch (a leaderboard's trending counts) then decodes it once per group commit,
not once per batch. Rows, read or scanned, are shared with the caches, so callers copy
before changing one (the engine's reads hand procedures private copies).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from txstream.engine.windows import WindowState
from txstream.model.declarations import Key, Record
from txstream.state.codec import StateCodec
from txstream.state.store import StateStore

_ABSENT = object()
SCAN_CACHE_ROWS = 10_000  # a longer scan is decoded from RocksDB each time
SCAN_CACHE_ENTRIES = 1_000


class CommittedState:
    def __init__(
        self,
        store: StateStore,
        codec: StateCodec,
        log: str = "changelog",
        cache_size: int = 200_000,
    ) -> None:
        self.store = store
        self.codec = codec
        self.log = log
        self._cache: dict[bytes, object] = {}
        self._cache_size = cache_size
        self._scans: dict[tuple[str, Key], list[tuple[Key, Record]]] = {}

    def get(self, table: str, key: Key) -> Record | None:
        kb = self.codec.key(table, key)
        row = self._cache.get(kb, _ABSENT)
        if row is _ABSENT:
            data = self.store.get(kb)
            row = None if data is None else self.codec.decode_row(table, data)
            self._remember(kb, row)
        return row  # type: ignore[return-value]

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        cached = self._scans.get((table, prefix))
        if cached is not None:
            return iter(cached)
        rows = []
        for kb, data in self.store.scan(self.codec.prefix(table, prefix)):
            _, k = self.codec.describe(kb)
            rows.append((k, self.codec.decode_row(table, data)))
        if len(rows) <= SCAN_CACHE_ROWS:
            if len(self._scans) >= SCAN_CACHE_ENTRIES:
                self._scans.clear()
            self._scans[(table, prefix)] = rows
        return iter(rows)

    def window(self, name: str) -> WindowState | None:
        kb = self.codec.window_key(name)
        state = self._cache.get(kb, _ABSENT)
        if state is _ABSENT:
            data = self.store.get(kb)
            state = None if data is None else self.codec.decode_window(name, data)
            self._remember(kb, state)
        return state  # type: ignore[return-value]

    def log_offset(self) -> int:
        """The next log offset to apply: everything before it is in RocksDB."""
        return self.store.offset(self.log) or 0

    def apply(
        self,
        writes: Mapping[bytes, bytes | None],
        next_offset: int,
        tables: Iterable[str] | None = None,
    ) -> None:
        """Make a committed group's writes durable here, with the log position reached.
        `tables` names the tables written, if known: cached scans of the others stay."""
        self.store.apply(writes, {self.log: next_offset})
        for kb in writes:
            self._cache.pop(kb, None)
        if tables is None:
            self._scans.clear()
            return
        touched = set(tables)
        for entry in [e for e in self._scans if e[0] in touched]:
            del self._scans[entry]

    def _remember(self, kb: bytes, value: object) -> None:
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[kb] = value
