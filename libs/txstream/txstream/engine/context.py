"""What a stored procedure sees during one transaction execution.

Everything a procedure does goes through its context: table and window access against its
private write set, emitting to its declared output streams, and aborting. Declarations are
enforced here, at run time, with errors that name the procedure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

from txstream.engine import formulas
from txstream.engine import windows as win
from txstream.engine.rows import private, private_values, privates
from txstream.engine.writeset import (
    TOMBSTONE,
    Base,
    Copier,
    WriteSet,
    read,
    read_window,
    scan,
)
from txstream.model.declarations import Key, Procedure, Record, Stream, Table, Window
from txstream.model.errors import ConstraintViolation, DataflowError, TxnAbort

SlideHook = Callable[["TeContext", str, int], None]
# Called before each table access with (table, key), or (table, None) for a scan; raises
# to stop a transaction that would touch rows a prepared 2PC transaction holds.
Guard = Callable[[str, Key | None], None]


def as_key(key: Key | int | str) -> Key:
    return key if isinstance(key, tuple) else (key,)


class TeTable:
    """One table as seen by one TE: reads see the TE's own writes first.

    Every procedure call goes through here, a few times per tuple, so the common path is
    written flat: no guard, constraint or trigger costs more than a test when absent.
    """

    __slots__ = ("_copy", "_ctx", "_name", "_table")

    def __init__(self, ctx: TeContext, table: Table) -> None:
        self._ctx = ctx
        self._table = table
        self._name = table.name
        # A table whose schema holds only scalars has only flat rows: `dict` copies them.
        self._copy: Copier = dict if table.name in ctx._flat_tables else private

    def get(self, key: Key | int | str) -> Record | None:
        k = key if isinstance(key, tuple) else (key,)
        ctx = self._ctx
        if ctx._guard is not None:
            ctx._guard(self._name, k)
        return read(ctx.ws, ctx.base, self._name, k, self._copy)

    def put(self, key: Key | int | str | Record, value: Record | None = None) -> None:
        """Write a row whole: `put(key, row)`, or `put(row)` with the key taken from the
        row's fields that the table's `key=` names."""
        if value is None:
            value, key = self._keyed(key)
        elif isinstance(key, dict):
            raise TypeError(f"table {self._name!r}: put(key, row) takes a key, not a row")
        k = key if isinstance(key, tuple) else (key,)
        ctx, name = self._ctx, self._name
        if ctx._guard is not None:
            ctx._guard(name, k)
        for c in self._table.constraints:
            if not c.check(value):
                raise ConstraintViolation(name, c.name, k)
        if self._table.aggregates:
            self._bounded(k, value)
        ws = ctx.ws
        ws.put(name, k, self._copy(value))
        if ws.formulas:
            formulas.unpin(ws, name, k)
        if name in ctx._insert_triggers:
            ctx.fire_insert(name, value)

    def _keyed(self, row: object) -> tuple[Record, Key]:
        """`put(row)`'s row and the key its fields give."""
        fields = self._table.key
        if not isinstance(row, dict):
            raise TypeError(f"table {self._name!r}: put(row) takes a row (a dict), or put(key, "
                            f"row); got {type(row).__name__}")  # fmt: skip
        if not fields:
            raise TypeError(f"table {self._name!r} declares no key= fields: put(key, row)")
        names = [f for f, _ in fields]
        missing = [f for f in names if f not in row]
        if missing:
            why = f"table {self._name!r}: put(row) needs the key fields {names}; no {missing}"
            raise TxnAbort("bad_row", why)
        return row, tuple(row[f] for f in names)

    def delete(self, key: Key | int | str) -> None:
        k = as_key(key)
        self._ctx.check(self._name, k)
        if self._table.aggregates:
            self._bounded(k, None)
        self._ctx.ws.put(self._name, k, TOMBSTONE)
        formulas.unpin(self._ctx.ws, self._name, k)

    def add(self, key: Key | int | str, deltas: Mapping[str, int | float]) -> Record:
        """Add to numeric fields of an existing row, as a formula (`engine.formulas`):
        concurrent additions to one row commute. Returns the row as this TE now sees it."""
        return self._formula(key, "add", deltas)

    def max(self, key: Key | int | str, values: Mapping[str, Any]) -> Record:
        """Raise fields of an existing row to at least `values`, as a formula."""
        return self._formula(key, "max", values)

    def append(self, key: Key | int | str, items: Mapping[str, Sequence[Any]]) -> Record:
        """Append items to list fields of an existing row, as a formula."""
        return self._formula(key, "append", items)

    def _formula(self, key: Key | int | str, op: formulas.Op, values: Mapping[str, Any]) -> Record:
        k = as_key(key)
        ctx, name = self._ctx, self._name
        ctx.check(name, k)
        row = read(ctx.ws, ctx.base, name, k, self._copy)
        where = f"table {name!r} key {k!r}: {op} {dict(values)!r}"
        if row is None:
            raise TxnAbort("no_row", f"{where}: a formula needs an existing row")
        todo = formulas.formulas_of(op, values)
        try:
            new = formulas.apply(row, todo)
        except KeyError as e:
            raise TxnAbort("bad_formula", f"{where}: the row has no field {e}") from None
        except TypeError as e:
            raise TxnAbort("bad_formula", f"{where}: {e}") from None
        for c in self._table.constraints:
            if not c.check(new):
                raise ConstraintViolation(name, c.name, k)
        if self._table.aggregates:
            self._bounded(k, new, frozenset(values) if ctx.basic and op == "add" else frozenset())
        ws = ctx.ws
        plain = formulas.pinned(ws, name, k)
        ws.put(name, k, new)
        formulas.record(ws, name, k, todo, plain)
        if name in ctx._insert_triggers:
            ctx.fire_insert(name, private(new))
        return self._copy(new)

    def _bounded(self, key: Key, new: Record | None, added: frozenset[str] = frozenset()) -> None:
        """A write to a table with aggregation constraints, whose totals change only by
        promised transactions, which SERIALIZE checks in one order (`model.aggregates`):
        a summed field changes only by a promise's add() (`added`: the fields this call
        adds to), a counted row is created or deleted only by a promise, and no row moves
        to another group."""
        ctx = self._ctx
        old = read(ctx.ws, ctx.base, self._name, key)
        for a in self._table.aggregates:
            try:
                before, after = a.contribution(old), a.contribution(new)
            except KeyError as e:
                raise TxnAbort("bad_row", str(e.args[0])) from None
            moved = before is not None and after is not None and before[0] != after[0]
            if moved and (a.counts or _amount(before) or _amount(after)):
                why = "a row stays in its group while it exists"
            elif a.counts and (before is None) != (after is None) and not ctx.basic:
                why = "only promised (BASIC) transactions create or delete its rows"
            elif a.counts or a.field in added or _amount(before) == _amount(after):
                continue
            elif ctx.basic:
                why = "a promised (BASIC) transaction changes it with add() only"
            else:
                why = "only promised (BASIC) transactions change it, with add()"
            raise TxnAbort(
                "aggregate_bound",
                f"table {self._name!r} key {list(key)}: {old!r} -> {new!r} is under "
                f"'{a.text}': {why}",
            )

    def scan(self, prefix: Key | int | str = ()) -> Iterator[tuple[Key, Record]]:
        """Rows whose key starts with `prefix`, in key order (materialized; safe to write)."""
        self._ctx.check(self._table.name, None)
        rows = scan(self._ctx.ws, self._ctx.base, self._name, as_key(prefix), self._copy)
        return iter(list(rows))


def _amount(contribution: tuple[str, float] | None) -> float:
    return 0 if contribution is None else contribution[1]


class TeWindow:
    """The owning procedure's window: inserts are staged until the window slides.

    Window states share their tuples, so tuples are copied on the way in (by `win.insert`)
    and out."""

    __slots__ = ("_ctx", "_window")

    def __init__(self, ctx: TeContext, window: Window) -> None:
        self._ctx = ctx
        self._window = window

    def _state(self) -> win.WindowState:
        state = read_window(self._ctx.ws, self._ctx.base, self._window.name)
        return state if state is not None else win.empty_state(self._window.spec)

    def insert(self, tup: Record) -> int:
        """Stage `tup`; returns how many slides it caused, after running their EE triggers."""
        state, slides = win.insert(self._window.spec, self._state(), tup)
        self._ctx.ws.windows[self._window.name] = state
        if slides:
            self._ctx.fire_slide(self._window.name, slides)
        return slides

    def visible(self) -> list[Record]:
        state = self._state()
        return privates(win.visible(state), state.flat)

    def staged(self) -> list[Record]:
        state = self._state()
        return privates(win.staged(state), state.flat)

    def visible_column(self, field: str) -> list[Any]:
        """`field` of each visible tuple, oldest first. An aggregate over one field (a count
        by contestant, say) needs no private copy of every tuple, which `visible` makes."""
        state = self._state()
        try:
            return private_values(win.visible(state), field, state.flat)
        except KeyError:
            raise DataflowError(
                f"procedure {self._ctx.procedure.name!r}: a visible tuple of window "
                f"{self._window.name!r} has no field {field!r}"
            ) from None


class TeContext:
    """The transaction context handed to a stored procedure with its batch."""

    def __init__(
        self,
        procedure: Procedure,
        batch_id: int,
        ws: WriteSet,
        base: Base,
        tables: Mapping[str, Table],
        windows: Mapping[str, Window],
        params: Any,
        insert_triggers: Mapping[str, list[Callable[[TeContext, Record], None]]],
        on_slide: SlideHook,
        guard: Guard | None = None,
        flat_tables: frozenset[str] = frozenset(),
    ) -> None:
        """`flat_tables`: tables whose schema holds only scalars (see `TeTable`)."""
        self.procedure = procedure
        self.batch_id = batch_id
        self.ws = ws
        self.base = base
        self.params = params
        self.outputs: dict[str, list[Record]] = {s: [] for s in procedure.outputs}
        self._tables = tables
        self._windows = windows
        self._insert_triggers = insert_triggers
        self._on_slide = on_slide
        self._guard = guard
        self._flat_tables = flat_tables
        # a promised transaction (`engine.promises`): sums under aggregation constraints
        # change by its add() formulas, checked when it is serialized
        self.basic = False

    def check(self, table: str, key: Key | None) -> None:
        if self._guard is not None:
            self._guard(table, key)

    def table(self, table: str | Table) -> TeTable:
        """`table`: the handle `app.table(...)` returned, or its name."""
        name = table if isinstance(table, str) else table.name
        t = self._tables.get(name)
        if t is None:
            raise DataflowError(f"procedure {self.procedure.name!r}: no table named {name!r}")
        return TeTable(self, t)

    def window(self, window: str | Window) -> TeWindow:
        """`window`: the handle `app.window(...)` returned, or its name."""
        name = window if isinstance(window, str) else window.name
        if name not in self.procedure.windows:
            raise DataflowError(
                f"procedure {self.procedure.name!r} does not own window {name!r}; "
                "a window is visible only to the procedure that declares it"
            )
        return TeWindow(self, self._windows[name])

    def emit(self, stream: str | Stream, tup: Record) -> None:
        """`stream`: the handle `app.stream(...)` returned, or its name."""
        name = stream if isinstance(stream, str) else stream.name
        out = self.outputs.get(name)
        if out is None:
            raise DataflowError(
                f"procedure {self.procedure.name!r} emits to {name!r}, which is not one of "
                f"its declared outputs {list(self.procedure.outputs)}"
            )
        out.append(tup)
        self.fire_insert(name, tup)

    def abort(self, reason: str, detail: str = "") -> NoReturn:
        raise TxnAbort(reason, detail)

    def fire_insert(self, target: str, tup: Record) -> None:
        for trigger in self._insert_triggers.get(target, ()):
            trigger(self, tup)

    def fire_slide(self, window: str, slides: int) -> None:
        self._on_slide(self, window, slides)
