"""What a procedure or transaction may do with its context: the public contract.

These are Protocols: the engine hands each TE an object of its own making
(`engine.context.TeContext`), and an app is typed against this surface alone, so nothing
of the engine's (write sets, the committed state, promise flags) is reachable from a typed
procedure. Each name here is in `txstream.__all__`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn, Protocol

from txstream.model.declarations import Key, Record, Stream, Table, Window

__all__ = ["TableView", "TxnContext", "WindowView"]


class TableView(Protocol):
    """One table as one TE sees it: reads see the TE's own writes first. Keys are ints,
    strings, or tuples of them."""

    def get(self, key: Key | int | str) -> Record | None:
        """The row at `key`, or None; a copy, so changing it changes nothing until `put`."""
        ...

    def put(self, key: Key | int | str | Record, value: Record | None = None) -> None:
        """Write `value` at `key`; or `put(row)`, the key taken from the fields the
        table's `key=` names."""
        ...

    def delete(self, key: Key | int | str) -> None:
        """Remove the row at `key`, if any."""
        ...

    def add(self, key: Key | int | str, deltas: Mapping[str, int | float]) -> Record:
        """Add to numeric fields of an existing row, recomputed at commit from the row as
        it then stands, so concurrent additions all count; the new row."""
        ...

    def max(self, key: Key | int | str, values: Mapping[str, Any]) -> Record:
        """Raise fields of an existing row to at least `values`, as `add` does; the new row."""
        ...

    def append(self, key: Key | int | str, items: Mapping[str, Sequence[Any]]) -> Record:
        """Append to array fields of an existing row, as `add` does; the new row."""
        ...

    def scan(self, prefix: Key | int | str = ()) -> Iterator[tuple[Key, Record]]:
        """Every (key, row) whose key starts with `prefix`, in key order."""
        ...


class WindowView(Protocol):
    """The procedure's own window: inserts are staged until the window slides."""

    def insert(self, tup: Record) -> int:
        """Stage `tup`; the number of slides it caused."""
        ...

    def visible(self) -> list[Record]:
        """The tuples the window holds now, oldest first."""
        ...

    def staged(self) -> list[Record]:
        """The tuples inserted since the last slide."""
        ...

    def visible_column(self, field: str) -> list[Any]:
        """One field of each visible tuple, without copying the tuples."""
        ...


class TxnContext(Protocol):
    """The context a stored procedure or OLTP transaction runs in: one transaction."""

    @property
    def batch_id(self) -> int:
        """The id of the batch this TE runs on."""
        ...

    @property
    def params(self) -> Any:
        """The app's parameters: an instance of its declared type (`App(params=...)`), or
        a mapping."""
        ...

    def table(self, table: str | Table) -> TableView:
        """A table, by the handle `app.table(...)` returned or by name."""
        ...

    def window(self, window: str | Window) -> WindowView:
        """The procedure's own window, by handle or name."""
        ...

    def emit(self, stream: str | Stream, tup: Record) -> None:
        """Append `tup` to an output stream of this TE's batch, by handle or name."""
        ...

    def abort(self, reason: str, detail: str = "") -> NoReturn:
        """Roll this TE back (and its nested transaction): nothing it did remains."""
        ...
