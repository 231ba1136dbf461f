"""The user API: an App collects declarations through a few methods and decorators.

app = App("leaderboard")
votes = app.stream("votes", schema=Vote)  # a TypedDict or dataclass, or an .avsc's name

@app.procedure(input=votes, outputs=[accepted])
def validate(ctx, batch): ...
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from txstream.model import aggregates as aggregation
from txstream.model.dataflow import Dataflow, build_dataflow
from txstream.model.declarations import (
    DEFAULT_EPOCH,
    Check,
    Constraint,
    Declarations,
    Isolation,
    NestedTransaction,
    PartitionBy,
    Procedure,
    ProcedureFn,
    Record,
    RecoveryMode,
    SlideTrigger,
    Stream,
    Table,
    Touches,
    Transaction,
    TransactionFn,
    Window,
    name_of,
)
from txstream.model.errors import DataflowError
from txstream.model.signature import Signature
from txstream.model.windows import TimeWindowSpec, TupleWindowSpec
from txstream.schemas.from_types import SchemaDeriver, TypeSchemaError
from txstream.schemas.registry import SchemaRegistry

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T", Stream, Table, Window, Procedure, NestedTransaction, Transaction)


class App:
    """A transactional streaming application: its declarations and their validated dataflow."""

    def __init__(
        self,
        name: str,
        params: Mapping[str, Any] | type | None = None,
        recovery: RecoveryMode | str = RecoveryMode.CHANGELOG,
        namespace: str | None = None,
    ) -> None:
        """`params`: the app's parameters as a mapping, or their type (a dataclass, a
        pydantic model or a TypedDict), which the values a worker is started with
        (`--params`) are validated into (`configure`); procedures get them as
        `ctx.params`. `recovery`: changelog (the default), strong or weak; see
        `recovery.policy`. `namespace`: of the schemas derived from record types (the
        app's name, `-` as `_`, by default)."""
        if not name.replace("_", "").replace("-", "").isalnum():
            raise DataflowError(f"app name {name!r} must be letters, digits, '-' or '_'")
        self.name = name
        self.params_type: type | None = None
        self.params: Any = None  # until configured, when its type has a field without default
        if isinstance(params, type):
            self.params_type = params
            with contextlib.suppress(DataflowError):  # defaults for every field: usable now
                self.configure({})
        else:
            self.params = dict(params or {})
        self.recovery = RecoveryMode.parse(str(recovery))
        self.decl = Declarations()
        self._types = SchemaDeriver(namespace or name.replace("-", "_"))

    def stream(self, name: str, schema: str | type, key_field: str | None = None) -> Stream:
        """`schema`: a TypedDict or dataclass whose Avro schema is derived (named
        `<app>.<class>`, `schemas.from_types`), or the full name of one in an `.avsc`."""
        full = self._schema("stream", name, schema)
        return self._add(self.decl.streams, Stream(name, full, key_field), "stream")

    def table(
        self,
        name: str,
        schema: str | type,
        constraints: Mapping[str, Check] | None = None,
        key: Sequence[str] | Mapping[str, str] = (),
        aggregates: Sequence[str] = (),
    ) -> Table:
        """`key` names the parts of the table's keys (each a long, or with a mapping, the
        Avro primitive type given), for readers outside the engine such as the warehouse
        (`txstream describe --format warehouse`). `aggregates` bound sums over many rows,
        e.g. `"sum(qty) >= 0 group by item"` (`model.aggregates`)."""
        cs = tuple(Constraint(n, c) for n, c in (constraints or {}).items())
        parts = tuple(key.items()) if isinstance(key, Mapping) else tuple((k, "long") for k in key)
        for part, avro in parts:
            if avro not in ("long", "int", "string"):
                raise DataflowError(
                    f"table {name!r}: key part {part!r} is a {avro!r}; a key part is a "
                    "long, an int or a string"
                )
        bounds = tuple(aggregation.parse(name, text) for text in aggregates)
        full = self._schema("table", name, schema)
        return self._add(self.decl.tables, Table(name, full, cs, parts, bounds), "table")

    def window(
        self,
        name: str,
        schema: str | type,
        *,
        rows: int | None = None,
        range: int | None = None,
        slide: int,
        time_field: str | None = None,
    ) -> Window:
        """ROWS `rows` SLIDE `slide`, or RANGE `range` SLIDE `slide` over `time_field`."""
        spec: TupleWindowSpec | TimeWindowSpec
        if (rows is None) == (range is None):
            raise DataflowError(f"window {name!r}: give exactly one of rows= or range=")
        if rows is not None:
            spec = TupleWindowSpec(rows=rows, slide=slide)
        else:
            if time_field is None:
                raise DataflowError(f"window {name!r}: a RANGE window needs time_field=")
            assert range is not None
            spec = TimeWindowSpec(range=range, slide=slide, time_field=time_field)
        full = self._schema("window", name, schema)
        return self._add(self.decl.windows, Window(name, full, spec), "window")

    def procedure(
        self,
        input: str | Stream,
        outputs: Iterable[str | Stream] = (),
        windows: Iterable[str | Window] = (),
        name: str | None = None,
        touches: Touches | None = None,
        partition_by: PartitionBy | None = None,
        ordered: bool = False,
        isolation: Isolation | str = Isolation.PL4,
        epoch: int = DEFAULT_EPOCH,
    ) -> Callable[[ProcedureFn], ProcedureFn]:
        """Declare a stored procedure; each run on one input batch is one TE.

        `touches(tuple)` lists the (table, key) pairs a tuple may read or write, wherever
        they live: the procedure then spans partitions. Each batch of its input goes to the
        engines owning those keys and runs as one transaction across them, serializable in
        batch order (`engine.spanning`). It must be deterministic,
        and may not use windows or scans. `isolation` (PL0-PL4, with `touches`) trades
        that order for speed: below PL3 each batch reads as of the start of its `epoch`
        (`Isolation`)."""
        level = _isolation(isolation, epoch)

        def register(fn: ProcedureFn) -> ProcedureFn:
            proc = Procedure(
                name=name or fn.__name__,
                fn=fn,
                input=name_of(input),
                outputs=tuple(name_of(o) for o in outputs),
                windows=tuple(name_of(w) for w in windows),
                touches=touches,
                partition_by=partition_by,
                ordered=ordered,
                isolation=level,
                epoch=epoch,
            )
            self._add(self.decl.procedures, proc, "procedure")
            return fn

        return register

    def transaction(
        self, name: str | None = None, params: type | None = None
    ) -> Callable[[TransactionFn], TransactionFn]:
        """Register an OLTP procedure `fn(ctx, params) -> result`, callable by clients.

        A call names a key; the partition engine owning that key runs it between TEs. A
        call spanning partitions runs each fragment in its engine under 2PC. `params`, a
        TypedDict, declares the parameters: a call that does not fit fails as bad_request."""

        def register(fn: TransactionFn) -> TransactionFn:
            tx_name = name or fn.__name__
            signature = None if params is None else Signature(tx_name, params)
            self._add(self.decl.transactions, Transaction(tx_name, fn, signature), "transaction")
            return fn

        return register

    def nested(
        self,
        name: str,
        procedures: Iterable[str | Callable[..., Any]],
        touches: Touches | None = None,
        isolation: Isolation | str = Isolation.PL4,
        epoch: int = DEFAULT_EPOCH,
    ) -> None:
        """Group procedures into one nested transaction per batch: the root on the batch,
        then each member on what the members before it emitted, all in one write set, so
        each sees its predecessors' effects, and all commit or none.

        `touches(tuple)`, over the root's input tuples, lists every (table, key) any member
        may read or write: the nested transaction then spans partitions, as a spanning
        procedure does (`engine.spanning`), serializable in batch order and atomic across
        the engines owning those keys; `isolation` and `epoch` as for a procedure."""
        level = _isolation(isolation, epoch)
        names = tuple(p if isinstance(p, str) else p.__name__ for p in procedures)
        nested = NestedTransaction(name, names, touches, level, epoch)
        self._add(self.decl.nested, nested, "nested transaction")

    def on_slide(self, window: str | Window) -> Callable[[F], F]:
        """An EE trigger: runs inside the owner's TE each time `window` slides."""

        def register(fn: F) -> F:
            w = name_of(window)
            self.decl.slide_triggers.setdefault(w, []).append(SlideTrigger(w, fn))
            return fn

        return register

    def on_insert(self, target: str | Stream | Table) -> Callable[[F], F]:
        """An EE trigger: runs inside the same TE on every insert into a stream or table."""

        def register(fn: F) -> F:
            self.decl.insert_triggers.setdefault(name_of(target), []).append(fn)
            return fn

        return register

    def dataflow(self) -> Dataflow:
        df = build_dataflow(self.decl)
        if self.recovery is not RecoveryMode.CHANGELOG:
            kinds = [k for k, ps in (("spanning", df.spanning_streams), ("repartitioned", df.hops))
                     if ps]  # fmt: skip
            if kinds:
                raise DataflowError(
                    f"app {self.name!r}: {' and '.join(kinds)} procedures need changelog "
                    f"recovery, not {self.recovery}"
                )
        return df

    def configure(self, values: Mapping[str, Any]) -> None:
        """Set the parameters from `values`: validated into the declared type (a
        `DataflowError` names each field that does not fit), or merged into the mapping."""
        if self.params_type is None:
            self.params = {**self.params, **values}
            return
        try:
            self.params = TypeAdapter(self.params_type).validate_python(dict(values))
        except ValidationError as e:
            problems = "; ".join(_field_problem(err) for err in e.errors())
            raise DataflowError(
                f"app {self.name!r}: params do not fit {self.params_type.__name__}: {problems}"
            ) from None

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        """The Avro schemas derived from the app's record types, by full name."""
        return dict(self._types.schemas)

    def schema_registry(self, schema_dir: Path) -> SchemaRegistry:
        """The schemas of `schema_dir`'s `.avsc` files and the app's derived ones."""
        return SchemaRegistry(schema_dir, self._types.schemas)

    def _schema(self, kind: str, name: str, schema: str | type) -> str:
        if isinstance(schema, str):
            return schema
        try:
            return self._types.record_name(schema)
        except TypeSchemaError as e:
            raise DataflowError(f"{kind} {name!r}: schema {e}") from None

    def _add(self, group: dict[str, T], item: T, kind: str) -> T:
        name: str = item.name
        if name in group:
            raise DataflowError(f"{kind} {item.name!r} is declared twice in app {self.name!r}")
        group[name] = item
        return item


class AppLoadError(ValueError):
    """The --app spec does not name a valid App, or a factory that returns one; the message
    is one line naming what was wrong."""


def load_app(spec: str, params: Mapping[str, Any]) -> App:
    """`package.module:attr`: an App, or a factory called with the app parameters (or with
    none, if it takes none) that returns one. Its dataflow is validated here, so every
    mistake surfaces as one AppLoadError, not as a traceback from deep in a service."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AppLoadError(f"--app {spec!r}: expected 'module:factory', e.g. 'myapp:build'")
    # The working directory is searched first, as `python -m` and `faust -A` do: an app
    # module beside the user needs no PYTHONPATH.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise AppLoadError(
            f"--app {spec!r}: no module named {e.name!r} (is it on PYTHONPATH?)"
        ) from None
    except Exception as e:
        raise AppLoadError(
            f"--app {spec!r}: importing {module_name} failed: {_one_line(e)}"
        ) from None
    target = getattr(module, attr, None)
    if target is None:
        raise AppLoadError(f"--app {spec!r}: module {module_name} has no attribute {attr!r}")
    application = target if isinstance(target, App) else _call(spec, target, params)
    if not isinstance(application, App):
        raise AppLoadError(
            f"--app {spec!r} returned {type(application).__name__}, not a txstream.App"
        )
    if application is target:  # an App itself: it takes the parameters here
        try:
            application.configure(params)
        except DataflowError as e:
            raise AppLoadError(f"--app {spec!r}: --params: {e}") from None
    try:
        application.dataflow()
    except DataflowError as e:
        raise AppLoadError(f"--app {spec!r}: the dataflow is invalid: {e}") from None
    return application


def _call(spec: str, factory: object, params: Mapping[str, Any]) -> object:
    if not callable(factory):
        raise AppLoadError(
            f"--app {spec!r} is a {type(factory).__name__}, neither an App nor a factory"
        )
    try:
        takes_params = bool(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        takes_params = True
    try:
        return factory(dict(params)) if takes_params else factory()
    except Exception as e:
        raise AppLoadError(f"--app {spec!r}: the factory raised {_one_line(e)}") from None


def _one_line(e: BaseException) -> str:
    """`Type: message` of `e`, on one line, with where it was raised when that is known."""
    text = " ".join(f"{type(e).__name__}: {e}".split())
    frames = traceback.extract_tb(e.__traceback__)
    if isinstance(e, SyntaxError) and e.filename:
        return f"{text} ({e.filename}:{e.lineno})"
    if frames:
        return f"{text} ({frames[-1].filename}:{frames[-1].lineno})"
    return text


__all__ = ["App", "AppLoadError", "Record", "load_app"]


def _field_problem(err: Any) -> str:
    """One of pydantic's errors as `field: what is wrong, got <value>`."""
    where = ".".join(str(part) for part in err["loc"]) or "params"
    got = "" if err["type"] == "missing" else f", got {err.get('input')!r}"
    return f"{where}: {err['msg']}{got}"


def _isolation(isolation: Isolation | str, epoch: int) -> Isolation:
    try:
        level = Isolation.parse(isolation)
    except ValueError as e:
        raise DataflowError(str(e)) from None
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise DataflowError(f"epoch {epoch!r}: expected a whole number of batches >= 1")
    return level
