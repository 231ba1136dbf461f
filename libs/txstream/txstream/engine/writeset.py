"""Layered write sets: a TE's private writes over its nested parent over the group overlay.

Reads walk the chain child-to-parent and fall through to the committed base, so a TE sees
its own writes first (read-your-writes). Commit merges a layer into its parent; abort drops
it. Nothing reaches the base store until the whole group has committed in Kafka.

Rows are shared along the chain and with the base, so `read` and `scan` hand out private
copies (`rows.private`), and whoever puts a row must put one it will not change again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from txstream.engine.rows import private
from txstream.engine.windows import WindowState
from txstream.model.declarations import Key, Record


class _Tombstone:
    __slots__ = ()

    def __repr__(self) -> str:
        return "TOMBSTONE"


TOMBSTONE: Any = _Tombstone()
_MISSING: Any = object()
Copier = Callable[[Record], Record]


class Base(Protocol):
    """The committed state under every write set: RocksDB in production, dicts in tests.

    The rows and window states it returns may be shared (with its caches): the engine
    copies before a procedure sees them, and never changes them itself."""

    def get(self, table: str, key: Key) -> Record | None: ...

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]: ...

    def window(self, name: str) -> WindowState | None: ...


class WriteSet:
    __slots__ = ("formulas", "parent", "tables", "windows")

    def __init__(self, parent: WriteSet | None = None) -> None:
        self.parent = parent
        self.tables: dict[str, dict[Key, Any]] = {}
        self.windows: dict[str, WindowState] = {}
        # (table, key) -> the formula updates of a row this layer changed by formulas only
        # (`engine.formulas`); None while it has none
        self.formulas: dict[tuple[str, Key], list[Any]] | None = None

    def lookup(self, table: str, key: Key) -> Any:
        """The newest write of `key` along the chain: a record, TOMBSTONE, or _MISSING."""
        ws: WriteSet | None = self
        while ws is not None:
            rows = ws.tables.get(table)
            if rows is not None:
                v = rows.get(key, _MISSING)
                if v is not _MISSING:
                    return v
            ws = ws.parent
        return _MISSING

    def written(self, table: str, key: Key) -> bool:
        """Whether a layer of the chain writes `key`."""
        return self.lookup(table, key) is not _MISSING

    def lookup_window(self, name: str) -> WindowState | None:
        ws: WriteSet | None = self
        while ws is not None:
            state = ws.windows.get(name)
            if state is not None:
                return state
            ws = ws.parent
        return None

    def put(self, table: str, key: Key, value: Any) -> None:
        rows = self.tables.get(table)
        if rows is None:
            rows = self.tables[table] = {}
        rows[key] = value

    def chain_writes(self, table: str, prefix: Key) -> dict[Key, Any]:
        """Writes under `prefix` along the chain, newest winning, for merging into a scan."""
        layers: list[dict[Key, Any]] = []
        ws: WriteSet | None = self
        while ws is not None:
            rows = ws.tables.get(table)
            if rows:
                layers.append(rows)
            ws = ws.parent
        n = len(prefix)
        merged: dict[Key, Any] = {}
        layers.reverse()  # oldest first, so newer writes win
        for rows in layers:
            for k, v in rows.items():
                if k[:n] == prefix:
                    merged[k] = v
        return merged

    def detach(self) -> None:
        """Stand alone: reads no longer fall through to the parent's writes (the parent
        is committed, or this set is held past it)."""
        self.parent = None

    def merge_into(self, parent: WriteSet) -> None:
        for table, rows in self.tables.items():
            target = parent.tables.get(table)
            if target is None:
                parent.tables[table] = dict(rows)
            else:
                target.update(rows)
        parent.windows.update(self.windows)


def read(ws: WriteSet, base: Base, table: str, key: Key, copy: Copier = private) -> Record | None:
    """The row at `key`, the caller's own to change (`copy` makes it so: plain `dict` where
    every row of the table is flat)."""
    v = ws.lookup(table, key)
    if v is _MISSING:
        v = base.get(table, key)
        return None if v is None else copy(v)
    return None if v is TOMBSTONE else copy(v)


def scan(
    ws: WriteSet, base: Base, table: str, prefix: Key, copy: Copier = private
) -> Iterator[tuple[Key, Record]]:
    """Committed rows under `prefix` overlaid with the chain's writes, in key order; each
    row is the caller's own to change."""
    rows: dict[Key, Any] = dict(base.scan(table, prefix))
    rows.update(ws.chain_writes(table, prefix))
    for k in sorted(rows):
        v = rows[k]
        if v is not TOMBSTONE:
            yield k, copy(v)


def read_window(ws: WriteSet, base: Base, name: str) -> WindowState | None:
    """The window's state, shared: its tuples must be copied before a procedure sees them."""
    state = ws.lookup_window(name)
    return state if state is not None else base.window(name)
