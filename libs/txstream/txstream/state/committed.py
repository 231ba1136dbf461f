"""The committed state the engine reads through: RocksDB, decoded, with a read cache.

It changes only in `apply`, after Kafka has committed the group that produced the writes,
so the caches can never hold an uncommitted value. Each apply records how far into the
recovery log (the changelog, or the command log) the stored state reaches.

The row cache is keyed by table, then key, so a read that hits it encodes no key. An
applied group's writes to cached rows replace them (write-through): with the row as the
group wrote it when its bytes decode back to that very row (`EncodedWrites.rows`), and
otherwise with the bytes RocksDB now holds, decoded on their next read. A hot row written
by every group is not read back from RocksDB after each commit, and what a read returns is
exactly what a read from RocksDB would (a row is not cached as the procedure put it when
it differs: an int in a double field comes back a float either way). A written window's
state goes in as its record decodes, which `window_codec` hands back with the record.

Besides rows, small scans are cached, decoded: a procedure or trigger that scans a table
on every batch (a leaderboard's trending counts) reads it from RocksDB once, and each
group's writes to the table are merged into the cached scan. Rows, read or scanned, are
shared with the caches, so callers copy before changing one (the engine's reads hand
procedures private copies).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from functools import partial

from txstream.engine.windows import WindowState
from txstream.model.declarations import Key, Record
from txstream.state.codec import WINDOW_TABLE, EncodedWrites, StateCodec
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
        # table -> key -> the row (None: absent), or its bytes until read
        self._rows: dict[str, dict[Key, object]] = {}
        self._cached = 0  # rows cached since the cache was last emptied (an upper bound)
        self._windows: dict[str, WindowState | None] = {}  # name -> state (None: empty)
        self._cache_size = cache_size
        self._scans: dict[tuple[str, Key], _Scan] = {}

    def get(self, table: str, key: Key) -> Record | None:
        rows = self._rows.get(table)
        if rows is None:
            rows = self._rows[table] = {}
        row = rows.get(key, _ABSENT)
        if type(row) is bytes:
            row = rows[key] = self.codec.decode_row(table, row)
        elif row is _ABSENT:
            data = self.store.get(self.codec.key(table, key))
            row = None if data is None else self.codec.decode_row(table, data)
            if self._cached >= self._cache_size:
                self._rows.clear()
                self._cached = 0
                rows = self._rows[table] = {}
            rows[key] = row
            self._cached += 1
        return row  # type: ignore[return-value]

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        cached = self._scans.get((table, prefix))
        if cached is not None:
            return iter(cached.rows)
        head = self.codec.prefix(table, prefix)
        keys, rows = [], []
        for kb, data in self.store.scan(head):
            keys.append(kb)
            rows.append((self.codec.row_key(table, kb), self.codec.decode_row(table, data)))
        if len(rows) <= SCAN_CACHE_ROWS:
            if len(self._scans) >= SCAN_CACHE_ENTRIES:
                self._scans.clear()
            self._scans[(table, prefix)] = _Scan(head, keys, rows)
        return iter(rows)

    def window(self, name: str) -> WindowState | None:
        if name not in self._windows:
            data = self.store.get(self.codec.window_key(name))
            self._windows[name] = None if data is None else self.codec.decode_window(name, data)
        return self._windows[name]

    def log_offset(self) -> int:
        """The next log offset to apply: everything before it is in RocksDB."""
        return self.store.offset(self.log) or 0

    def apply(self, writes: Mapping[bytes, bytes | None], next_offset: int) -> None:
        """Make a committed group's writes durable here, with the log position reached.
        Writes from `StateCodec.encode_writes` go into the caches; any others (recovery's,
        read off the changelog) empty them."""
        self.store.apply(writes, {self.log: next_offset})
        if not isinstance(writes, EncodedWrites) or len(writes.origins) != len(writes):
            self._rows.clear()
            self._windows.clear()
            self._scans.clear()
            return
        tables, windows = self._rows, self._windows
        # the writes to each table a cached scan reads
        touched: dict[str, list[tuple[bytes, Key, Record | bytes | None]]] = {
            table: [] for table, _ in self._scans
        }
        entries = zip(writes.origins, writes.items(), writes.rows, strict=True)
        for (table, key), (kb, data), row in entries:
            if table == WINDOW_TABLE:
                name = str(key[0])
                windows[name] = writes.windows[name]
                continue
            value = data if row is None else row  # bytes: decoded on its next read
            if table in touched:
                touched[table].append((kb, key, value))
            rows = tables.get(table)
            if rows is None:
                continue
            # A row read while it existed is the kind read again (a counter, a contestant);
            # a key read while absent and then inserted mostly is not (an id checked for a
            # duplicate), and keeping those would grow the cache by every insert.
            if rows.get(key) is not None:
                rows[key] = value
            else:
                rows.pop(key, None)
        if self._scans:
            for entry in [e for e in self._scans if touched[e[0]]]:
                decode = partial(self.codec.decode_row, entry[0])
                merged = self._scans.pop(entry).merged(touched[entry[0]], decode)
                if merged is not None:
                    self._scans[entry] = merged


class _Scan:
    """A cached scan's rows, in the order of their encoded keys (RocksDB's), kept beside
    them: a group's writes are merged in by those keys, each written row decoded at most
    once and placed by binary search, rather than the whole scan read back and decoded
    (or re-sorted) after every commit that wrote its table: a bank's 5,000 accounts per
    engine, scanned by a snapshot query, are written by every commit."""

    __slots__ = ("head", "keys", "rows")

    def __init__(self, head: bytes, keys: list[bytes], rows: list[tuple[Key, Record]]) -> None:
        self.head = head  # the scan's key prefix, encoded
        self.keys = keys
        self.rows = rows

    def merged(
        self,
        writes: list[tuple[bytes, Key, Record | bytes | None]],
        decode: Callable[[bytes], Record],
    ) -> _Scan | None:
        """The scan after `writes` to its table (encoded key, key, the row or its bytes,
        None deleting); None if it grows past what is cached."""
        head = self.head
        ours = [w for w in writes if w[0].startswith(head)]
        if not ours:
            return self
        # New lists: another thread may be iterating the old ones (a query's scan).
        keys, rows = self.keys[:], self.rows[:]
        for kb, key, value in ours:
            i = bisect_left(keys, kb)
            found = i < len(keys) and keys[i] == kb
            if value is None:
                if found:
                    del keys[i]
                    del rows[i]
                continue
            row = (key, decode(value) if isinstance(value, bytes) else value)
            if found:
                rows[i] = row
            else:
                keys.insert(i, kb)
                rows.insert(i, row)
        if len(keys) > SCAN_CACHE_ROWS:
            return None
        return _Scan(head, keys, rows)
