"""The committed state the engine reads through: RocksDB, decoded, with a read cache.

It changes only in `apply`, after Kafka has committed the group that produced the writes,
so the cache can never hold an uncommitted value. Each apply records how far into the
recovery log (the changelog, or the command log) the stored state reaches.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from txstream.engine.windows import WindowState
from txstream.model.declarations import Key, Record
from txstream.state.codec import StateCodec
from txstream.state.store import StateStore

_ABSENT = object()


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

    def get(self, table: str, key: Key) -> Record | None:
        kb = self.codec.key(table, key)
        row = self._cache.get(kb, _ABSENT)
        if row is _ABSENT:
            data = self.store.get(kb)
            row = None if data is None else self.codec.decode_row(table, data)
            self._remember(kb, row)
        return None if row is None else dict(row)  # type: ignore[call-overload]

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        for kb, data in self.store.scan(self.codec.prefix(table, prefix)):
            _, k = self.codec.describe(kb)
            yield k, self.codec.decode_row(table, data)

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

    def apply(self, writes: Mapping[bytes, bytes | None], next_offset: int) -> None:
        """Make a committed group's writes durable here, with the log position reached."""
        self.store.apply(writes, {self.log: next_offset})
        for kb in writes:
            self._cache.pop(kb, None)

    def _remember(self, kb: bytes, value: object) -> None:
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[kb] = value
