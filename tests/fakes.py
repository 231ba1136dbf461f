"""In-memory stand-ins for pure-logic unit tests; integration tests use the real stores."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from txstream.engine.group import Group
from txstream.engine.windows import WindowState
from txstream.engine.writeset import TOMBSTONE
from txstream.model.declarations import Key, Record


class MemoryBase:
    """Committed state as dicts; `apply` plays the part of RocksDB after a Kafka commit.

    Rows are deep-copied in and out, as encoding and decoding do for RocksDB."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Key, Record]] = {}
        self.windows: dict[str, WindowState] = {}

    def get(self, table: str, key: Key) -> Record | None:
        row = self.tables.get(table, {}).get(key)
        return None if row is None else copy.deepcopy(row)

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        n = len(prefix)
        rows = self.tables.get(table, {})
        for k in sorted(rows):
            if k[:n] == prefix:
                yield k, copy.deepcopy(rows[k])

    def window(self, name: str) -> WindowState | None:
        return self.windows.get(name)

    def apply(self, group: Group) -> None:
        for table, rows in group.ws.tables.items():
            target = self.tables.setdefault(table, {})
            for k, v in rows.items():
                if v is TOMBSTONE:
                    target.pop(k, None)
                else:
                    target[k] = copy.deepcopy(v)
        self.windows.update(group.ws.windows)

    def snapshot(self) -> dict[str, Any]:
        return {"tables": {t: dict(r) for t, r in self.tables.items()}, "windows": self.windows}
