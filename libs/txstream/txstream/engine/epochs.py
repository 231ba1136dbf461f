"""Reads as of an epoch's start: how spanning batches below PL3 stop waiting for each other.

At PL4 a batch's reads of a key go out only after every earlier batch declaring that key
has run, so batches on a hot key pass it along one exchange round trip at a time. Below
PL3 (`Isolation.epochs`) a batch of epoch e (its batch id // the epoch size) reads every
key as it stood when epoch e began: after every batch of the epochs before, before any of
its own. Its reads then wait only for earlier epochs, and every batch of one epoch takes
its round trip at once. Writes still land in batch order; what is given up is that a batch
sees the batches of its own epoch (read committed, not serializable: a read-modify-write of
one key by two batches of an epoch loses the first's update).

The reads stay deterministic, which is what keeps the exchange exactly once: they are a
function of the input before the epoch. So an engine keeps, for the epoch it is in, the
value each of its keys had before a batch of that epoch first changed it, in memory and in
its state (a system table committed with the group), and a restart in mid-epoch reads what
the others were sent before the crash. An epoch's values are dropped once a batch of a
later epoch runs: by then every batch of the epoch has run here. They are kept as JSON, as
a prepared 2PC transaction's writes are: the tables such batches write hold JSON values.
"""

from __future__ import annotations

import json

from txstream.engine.rows import private
from txstream.engine.writeset import TOMBSTONE, Base, WriteSet, read, scan
from txstream.model.declarations import Key, Record

EPOCH_TABLE = "__epoch__"  # (stream, epoch, table, *key) -> {"row": JSON of the row, or null}

Cell = tuple[str, Key]  # (table, key)


class EpochReads:
    def __init__(self) -> None:
        self._before: dict[tuple[str, int], dict[Cell, Record | None]] = {}

    def load(self, ws: WriteSet, base: Base) -> None:
        """After a restart, the values kept for epochs not over yet; only from a base
        caught up with its changelog (`SpanRunner.load`): one behind it lacks values kept
        since its last flush, and `read` would then give the key as a later batch left it."""
        for key, row in scan(ws, base, EPOCH_TABLE, ()):
            stream, epoch, table, *rest = key
            cell = (str(table), tuple(rest))
            self._before.setdefault((str(stream), int(epoch)), {})[cell] = json.loads(row["row"])

    def read(
        self, stream: str, epoch: int, table: str, key: Key, ws: WriteSet, base: Base
    ) -> Record | None:
        """`key` as it stood when `epoch` began; its earlier epochs must all have run here."""
        kept = self._before.get((stream, epoch))
        if kept is not None and (table, key) in kept:
            row = kept[(table, key)]
            return None if row is None else private(row)
        return read(ws, base, table, key)

    def keep(
        self, stream: str, epoch: int, before: dict[Cell, Record | None], ws: WriteSet, base: Base
    ) -> None:
        """A batch of `epoch` has just run, and `before` held its keys as they were before
        it: keep the first value of each key it changed."""
        kept = self._before.setdefault((stream, epoch), {})
        for (table, key), row in before.items():
            if (table, key) in kept or read(ws, base, table, key) == row:
                continue
            try:
                text = json.dumps(row)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"table {table!r} key {key!r}: a row written below PL3 must hold JSON "
                    f"values, to be kept while its epoch runs ({e})"
                ) from None
            kept[(table, key)] = row
            ws.put(EPOCH_TABLE, (stream, epoch, table, *key), {"row": text})

    def close_before(self, stream: str, epoch: int, ws: WriteSet) -> None:
        """A batch of `epoch` is about to run: no batch of an earlier epoch is left here."""
        for s, e in [k for k in self._before if k[0] == stream and k[1] < epoch]:
            for table, key in self._before.pop((s, e)):
                ws.put(EPOCH_TABLE, (s, e, table, *key), TOMBSTONE)
