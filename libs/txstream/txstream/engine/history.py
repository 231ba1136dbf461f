"""Recent before-images of an engine's rows, so every engine can be read as of one batch.

Engines run the spanning streams' batches in one order (by batch id) but not in step: when a query
reaches them, one has run batch 40 and another batch 37. A serializable query reads them all
as of the same point b (a consistent cut): an engine behind answers once it has run batch b,
and an engine ahead takes its rows back to b with the before-images of every write since.
Point b is batch b and whatever else the engine ran before batch b+1 (a per-partition TE,
an OLTP transaction: work on this engine's keys alone, which any cut may place on either
side). So each write is tagged with the batch it belongs to: a spanning batch's own id, or
for anything else the last batch run before it, and going back to b undoes every write
tagged above b. Only the newest `LIMIT` before-images are kept: a point older than what
they reach is refused, and the query tried again at a newer one.

Keeping them costs a read per write, so an engine keeps them only while cut queries
(snapshot, serializable) come: the first one starts it (answered as of the engine's newest
batch, which needs none), and `KEEP_S` seconds without one stop it. A later round of the
same query asks for a batch at least as new as the oldest any engine answered with, which
each engine answered after it had started keeping them; only a restart loses them.
"""

from __future__ import annotations

import time
from collections import deque

from txstream.engine.rows import shared
from txstream.engine.writeset import Base, WriteSet, read
from txstream.model.declarations import Key, Record

NONE = -1  # the point before the stream's first batch
LIMIT = 200_000
KEEP_S = 60.0


class TooOld(Exception):
    """The point asked for is older than the kept before-images reach."""


class History:
    def __init__(self, point: int | None, tables: frozenset[str]) -> None:
        self.point = NONE if point is None else point
        self.floor = self.point  # the oldest point the kept before-images can rebuild
        self.running: int | None = None  # the spanning batch running now, if one is
        self.recording = False
        self._until = 0.0
        self._tables = tables
        self._before: deque[tuple[int, str, Key, Record | None]] = deque()

    def asked(self) -> None:
        """A cut query came: keep before-images from here on, for `KEEP_S` more."""
        if not self.recording:
            self.recording, self.floor = True, self.point
        self._until = time.monotonic() + KEEP_S

    def passed(self, batch_id: int) -> None:
        self.point = batch_id
        if self.recording and time.monotonic() > self._until:
            self.recording = False
            self._before.clear()

    def record(self, ws: WriteSet, parent: WriteSet, base: Base) -> None:
        """`ws` is about to merge into `parent`, the group's: keep what it overwrites."""
        tag = self.point if self.running is None else self.running
        for table, rows in ws.tables.items():
            if table not in self._tables:
                continue
            for key in rows:
                before = read(parent, base, table, key, shared)  # never changed once put
                self._before.append((tag, table, key, before))
        while len(self._before) > LIMIT:
            self.floor = max(self.floor, self._before.popleft()[0])

    def rows_at(
        self, point: int, table: str, rows: dict[Key, Record], key: Key | None = None
    ) -> dict[Key, Record]:
        """`rows`, the table now (or its row at `key`), taken back to `point`."""
        if point < self.floor or (point < self.point and not self.recording):
            raise TooOld(
                f"spanning batch {point} is older than this engine can read back to (batch "
                f"{self.floor})"
            )
        for tag, t, k, before in reversed(self._before):
            if tag <= point:
                break
            if t != table or (key is not None and k != key):
                continue
            if before is None:
                rows.pop(k, None)
            else:
                rows[k] = before
        return rows
