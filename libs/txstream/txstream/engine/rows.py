"""Rows a transaction execution owns outright.

Stored rows are shared by reference: between write-set layers, with the committed state's
read and scan caches, and with window states. A procedure that changed a row it read, or a
row after handing it to `put` or a window, would change state behind its write set, and an
abort would not undo it. So rows are copied on their way in and out of tables and windows.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from datetime import date, datetime, time
from decimal import Decimal
from operator import itemgetter
from typing import Any
from uuid import UUID

from txstream.model.declarations import Record

# Values no one can change in place: Avro's primitives and fastavro's logical types.
_IMMUTABLE = frozenset(
    {str, int, float, bool, bytes, type(None), Decimal, datetime, date, time, UUID}
)


def is_flat(row: Record) -> bool:
    """Whether `row` holds only values no one can change in place (a shallow copy is
    private). Most rows do: every row of the Leaderboard."""
    return _IMMUTABLE.issuperset(map(type, row.values()))


def owned(row: Record) -> tuple[Record, bool]:
    """A copy of `row` that shares nothing mutable with it, and whether `row` is flat: a
    flat row pays only a shallow copy; a row holding a list, a map or anything else is
    deep-copied."""
    flat = is_flat(row)
    return (dict(row) if flat else copy.deepcopy(row)), flat


def private(row: Record) -> Record:
    """A copy of `row` that shares nothing mutable with it (see `owned`)."""
    return owned(row)[0]


def shared(row: Record) -> Record:
    """`row` itself, for a reader that never changes what it reads (a query's totals, a
    history's before-images), where a private copy would be wasted."""
    return row


def privates(rows: Iterable[Record], flat: bool) -> list[Record]:
    """Private copies of `rows`; `flat` when every one of them is known to be flat."""
    return list(map(dict, rows)) if flat else [private(r) for r in rows]


def private_values(rows: Iterable[Record], field: str, flat: bool) -> list[Any]:
    """`field` of each of `rows`, in order, each value the caller's own: only a value that
    can change in place is copied, so a flat window's column costs no copy at all.
    Raises KeyError for a row without `field`."""
    values = list(map(itemgetter(field), rows))
    if flat:
        return values
    return [v if type(v) in _IMMUTABLE else copy.deepcopy(v) for v in values]
