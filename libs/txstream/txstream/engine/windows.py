"""Window state and sliding (S-Store): a window is owned by one stored procedure.

The state is an immutable value and `insert` returns a new one, so the engine can hold a TE's
window write in its write set and simply drop it on abort: the state the TE started from is
never touched. An insert that does not slide copies only the staged tuples (fewer than SLIDE
for a tuple window) and shares the visible tuples with the old state.

Tuple windows, ROWS n SLIDE s: a new tuple is staged (invisible). When s tuples are staged,
they all become visible at once (one slide) and the visible window keeps the last n tuples.
After A arrivals it is the last n of the first floor(A/s)*s tuples; empty before the first slide.

Time windows, RANGE t SLIDE s, over an integer field of every tuple (any unit, e.g. ms): slide
boundaries are the multiples of s. The state keeps the last boundary b crossed; visible tuples
have timestamps in the half-open [b - t, b), staged ones in [b, b + s).
- The first tuple only sets b to the boundary at or before its timestamp: nothing is visible
  before the first slide.
- A tuple at or past b + s slides to b' = the last boundary at or before its timestamp,
  crossing (b' - b) / s boundaries at once: every staged tuple becomes visible, tuples older
  than b' - t are evicted, and the new tuple is staged.
- A tuple older than b is rejected with WindowError: its slide period is over, and since batch
  ids imply time order, a late tuple means the input order is broken. Within the open period
  [b, b + s) timestamps may come in any order; the window keeps arrival order.

Triggers: `insert` returns how many slide boundaries it crossed. A tuple window slides at most
once per insert, so firing the on-slide trigger once per insert that slid is S-Store's "once per
slide". A time window can cross several boundaries in one insert, but a TE can only ever see the
final window, so the trigger should fire once for that insert: firing it per boundary would
repeat its effects on the same window. The count is for metrics (window slides).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

from txstream.engine.rows import is_flat, owned
from txstream.model.windows import TimeWindowSpec, TupleWindowSpec, WindowSpec

Row = dict[str, Any]
"""A tuple as fastavro decodes a record; stored by reference, so it must not be mutated."""


class WindowError(ValueError):
    """A tuple the window cannot take; the TE inserting it must abort."""


@final
class WindowState:
    """One window's contents; `boundary` is the last boundary crossed (time windows only).
    `flat`: every tuple that entered holds only immutable values, so a shallow copy of one
    is private (`rows.privates`); a derived fact, so not part of the state's value.

    Read-only (`Final`), and a class of its own rather than a frozen dataclass: every insert
    makes one, and compiled by mypyc it is made in a tenth of the time."""

    __slots__ = ("boundary", "flat", "staged", "visible")

    def __init__(
        self,
        staged: tuple[Row, ...] = (),
        visible: tuple[Row, ...] = (),
        boundary: int | None = None,
        flat: bool = True,
    ) -> None:
        self.staged: Final = staged
        self.visible: Final = visible
        self.boundary: Final = boundary
        self.flat: Final = flat

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WindowState):
            return NotImplemented
        return (self.staged, self.visible, self.boundary) == (
            other.staged,
            other.visible,
            other.boundary,
        )

    def __repr__(self) -> str:
        return (
            f"WindowState(staged={self.staged!r}, visible={self.visible!r}, "
            f"boundary={self.boundary!r}, flat={self.flat!r})"
        )


_EMPTY = WindowState()


def empty_state(spec: WindowSpec) -> WindowState:
    """A window no tuple has entered; takes the spec so callers need not know both kinds agree."""
    return _EMPTY


def visible(state: WindowState) -> tuple[Row, ...]:
    return state.visible


def staged(state: WindowState) -> tuple[Row, ...]:
    return state.staged


def insert(spec: WindowSpec, state: WindowState, tup: Row) -> tuple[WindowState, int]:
    """The state after a private copy of `tup` arrives, and how many slide boundaries that
    crossed.

    Raises WindowError (a time window's late or untimed tuple) without changing anything.
    """
    own, flat = owned(tup)
    if isinstance(spec, TupleWindowSpec):
        return _insert_rows(spec, state, own, state.flat and flat)
    return _insert_time(spec, state, own, state.flat and flat)


def _insert_rows(
    spec: TupleWindowSpec, state: WindowState, tup: Row, flat: bool
) -> tuple[WindowState, int]:
    arrived = (*state.staged, tup)
    if len(arrived) < spec.slide:
        return WindowState(arrived, state.visible, None, flat), 0
    return WindowState((), (state.visible + arrived)[-spec.rows :], None, flat), 1


def _insert_time(
    spec: TimeWindowSpec, state: WindowState, tup: Row, flat: bool
) -> tuple[WindowState, int]:
    ts = _timestamp(spec, tup)
    start = ts - ts % spec.slide
    b = state.boundary
    if b is None:
        return WindowState((tup,), (), start, flat), 0
    if ts < b:
        raise WindowError(
            f"late tuple: {spec.time_field}={ts} is before the window boundary {b} "
            f"(RANGE {spec.range} SLIDE {spec.slide}); its slide period is already over"
        )
    if ts < b + spec.slide:
        return WindowState((*state.staged, tup), state.visible, b, flat), 0
    oldest = start - spec.range
    kept = tuple(r for r in state.visible + state.staged if r[spec.time_field] >= oldest)
    return WindowState((tup,), kept, start, flat), (start - b) // spec.slide


def _timestamp(spec: TimeWindowSpec, tup: Row) -> int:
    ts = tup.get(spec.time_field)
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise WindowError(
            f"time window over {spec.time_field!r}: the tuple's {spec.time_field!r} must be an "
            f"integer timestamp, got {ts!r}"
        )
    return ts


def to_record(state: WindowState) -> dict[str, Any]:
    """A plain value matching `state_schema`, for the changelog."""
    return {
        "staged": list(state.staged),
        "visible": list(state.visible),
        "boundary": state.boundary,
    }


def from_record(record: Mapping[str, Any]) -> WindowState:
    staged, visible = tuple(record["staged"]), tuple(record["visible"])
    flat = all(map(is_flat, staged)) and all(map(is_flat, visible))
    return WindowState(staged, visible, record["boundary"], flat)


def state_schema(tuple_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro schema of `to_record` for windows of `tuple_schema` records.

    Avro allows a named type to be defined only once, so `visible` refers to it by full name.
    """
    name = str(tuple_schema["name"])
    namespace = tuple_schema.get("namespace")
    fullname = f"{namespace}.{name}" if namespace and "." not in name else name
    return {
        "type": "record",
        "name": "WindowState",
        "fields": [
            {"name": "staged", "type": {"type": "array", "items": dict(tuple_schema)}},
            {"name": "visible", "type": {"type": "array", "items": fullname}},
            {"name": "boundary", "type": ["null", "long"], "default": None},
        ],
    }
