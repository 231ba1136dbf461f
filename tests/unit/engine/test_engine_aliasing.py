"""A TE's rows are its own: changing what it read, or what it handed over, touches no state.

Rows with nested values (lists, maps) are the case a shallow copy misses, so every test
keeps a list in its row. Each runs over the in-memory fake and over the real committed
state (RocksDB with its read and scan caches), whose decoded rows are shared between reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import pytest

from tests.support.fakes import MemoryBase
from txstream import TxnContext
from txstream.engine.group import CommitGroup
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.windows import WindowState
from txstream.engine.writeset import Base, read, read_window, scan
from txstream.model.app import App
from txstream.model.declarations import Key, Record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.state.committed import CommittedState
from txstream.state.store import StateStore

ROW_SCHEMA = {
    "type": "record",
    "name": "Row",
    "namespace": "nested",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
Action = Callable[[TxnContext], None]


class Committing(Base, Protocol):
    def commit(self, group: CommitGroup) -> None: ...


class FakeBase(MemoryBase):
    def commit(self, group: CommitGroup) -> None:
        self.apply(group)


class RocksBase:
    """The committed state, and a commit as the group committer makes one (a wrapper: the
    committed state may be compiled, which no Python class can extend)."""

    def __init__(self, state: CommittedState) -> None:
        self.state = state

    def get(self, table: str, key: Key) -> Record | None:
        return self.state.get(table, key)

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        return self.state.scan(table, prefix)

    def window(self, name: str) -> WindowState | None:
        return self.state.window(name)

    def commit(self, group: CommitGroup) -> None:
        state = self.state
        state.apply(state.codec.encode_writes(group.ws), state.log_offset() + 1)


def make_app(actions: dict[int, Action]) -> App:
    """One procedure that runs `actions[batch id]` on each batch."""
    app = App("nested")
    app.stream("a", schema="nested.Row")
    app.table("t", schema="nested.Row")
    app.window("w", schema="nested.Row", rows=3, slide=1)

    @app.procedure(input="a", windows=["w"])
    def p(ctx: TxnContext, batch: Sequence[Record]) -> None:
        actions[ctx.batch_id](ctx)

    return app


@pytest.fixture(params=["memory", "rocksdb"])
def make_base(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[App], Committing]]:
    stores: list[StateStore] = []

    def make(app: App) -> Committing:
        if request.param == "memory":
            return FakeBase()
        schemas = tmp_path / "schemas"
        (schemas / "nested").mkdir(parents=True)
        (schemas / "nested" / "Row.avsc").write_text(json.dumps(ROW_SCHEMA))
        codec = StateCodec(app.dataflow(), SchemaRegistry(schemas))
        stores.append(StateStore.open(tmp_path / "db"))
        return RocksBase(CommittedState(stores[-1], codec))

    yield make
    for store in stores:
        store.close()


def run(
    make_base: Callable[[App], Committing], actions: dict[int, Action], commit_after: set[int]
) -> tuple[PartitionEngine, Committing]:
    """Process batches 1.. in order, committing the group after each id in `commit_after`."""
    app = make_app(actions)
    base = make_base(app)
    engine = PartitionEngine(app.dataflow(), base, 0, app.params)
    for batch_id in sorted(actions):
        engine.process("a", batch_id, [{}])
        if batch_id in commit_after:
            base.commit(engine.take_group())
    return engine, base


def put_row(ctx: TxnContext) -> None:
    ctx.table("t").put(1, {"n": 1, "tags": ["kept"]})


def insert_row(ctx: TxnContext) -> None:
    ctx.window("w").insert({"n": 1, "tags": ["kept"]})


def boom(ctx: TxnContext) -> None:
    raise RuntimeError("abort after changing what was read")


def mutate_get(ctx: TxnContext) -> None:
    row = ctx.table("t").get(1)
    assert row is not None
    row["tags"].append("leaked")
    boom(ctx)


def mutate_scan(ctx: TxnContext) -> None:
    for _, row in ctx.table("t").scan():
        row["tags"].append("leaked")
        row["n"] = 99
    boom(ctx)


def mutate_window(ctx: TxnContext) -> None:
    for row in ctx.window("w").visible():
        row["tags"].append("leaked")
        row["n"] = 99
    boom(ctx)


def mutate_column(ctx: TxnContext) -> None:
    for tags in ctx.window("w").visible_column("tags"):
        tags.append("leaked")
    boom(ctx)


def stored_row(engine: PartitionEngine, base: Base) -> Record | None:
    """Row 1 as a get and as a scan see it, which must agree."""
    row = read(engine.group.ws, base, "t", (1,))
    assert list(scan(engine.group.ws, base, "t", ())) == ([] if row is None else [((1,), row)])
    return row


def stored_window(engine: PartitionEngine, base: Base) -> WindowState | None:
    return read_window(engine.group.ws, base, "w")


def final_state(engine: PartitionEngine, base: Committing) -> tuple[Record | None, list[Record]]:
    """The row and the window's visible tuples, as the next TE and the committed state see
    them; they must agree."""
    before_commit = stored_row(engine, base), stored_window(engine, base)
    base.commit(engine.take_group())
    after = stored_row(engine, base), stored_window(engine, base)
    assert before_commit == after
    row, window = after
    return row, [] if window is None else list(window.visible)


@pytest.mark.parametrize("committed_first", [True, False], ids=["from_base", "from_overlay"])
@pytest.mark.parametrize("mutate", [mutate_get, mutate_scan], ids=["get", "scan"])
def test_an_aborted_te_changing_a_nested_value_it_read_changes_no_row(
    make_base: Callable[[App], Committing], mutate: Action, committed_first: bool
) -> None:
    engine, base = run(make_base, {1: put_row, 2: mutate}, {1} if committed_first else set())
    assert [a.batch_id for a in engine.group.aborts] == [2]
    row, _ = final_state(engine, base)
    assert row == {"n": 1, "tags": ["kept"]}


@pytest.mark.parametrize("committed_first", [True, False], ids=["from_base", "from_overlay"])
@pytest.mark.parametrize("mutate", [mutate_window, mutate_column], ids=["tuples", "column"])
def test_an_aborted_te_changing_window_tuples_it_read_changes_no_window(
    make_base: Callable[[App], Committing], mutate: Action, committed_first: bool
) -> None:
    actions: dict[int, Action] = {1: insert_row, 2: mutate}
    engine, base = run(make_base, actions, {1} if committed_first else set())
    assert [a.batch_id for a in engine.group.aborts] == [2]
    _, visible = final_state(engine, base)
    assert visible == [{"n": 1, "tags": ["kept"]}]


def test_changing_a_row_after_putting_it_changes_nothing_stored(
    make_base: Callable[[App], Committing],
) -> None:
    def put_then_change(ctx: TxnContext) -> None:
        row: Record = {"n": 1, "tags": ["kept"]}
        ctx.table("t").put(1, row)
        row["tags"].append("leaked")
        row["n"] = 99

    engine, base = run(make_base, {1: put_then_change}, set())
    assert engine.group.aborts == []
    row, _ = final_state(engine, base)
    assert row == {"n": 1, "tags": ["kept"]}


def test_changing_a_tuple_after_inserting_it_changes_no_window(
    make_base: Callable[[App], Committing],
) -> None:
    def insert_then_change(ctx: TxnContext) -> None:
        tup: Record = {"n": 1, "tags": ["kept"]}
        ctx.window("w").insert(tup)
        tup["tags"].append("leaked")
        tup["n"] = 99

    engine, base = run(make_base, {1: insert_then_change}, set())
    assert engine.group.aborts == []
    _, visible = final_state(engine, base)
    assert visible == [{"n": 1, "tags": ["kept"]}]


def test_a_committed_te_changing_what_it_read_without_put_changes_nothing(
    make_base: Callable[[App], Committing],
) -> None:
    """Only `put` writes: a changed copy that is never put back is not a write."""

    def change_without_put(ctx: TxnContext) -> None:
        row = ctx.table("t").get(1)
        assert row is not None
        row["tags"].append("leaked")

    engine, base = run(make_base, {1: put_row, 2: change_without_put}, {1})
    assert engine.group.aborts == []
    row, _ = final_state(engine, base)
    assert row == {"n": 1, "tags": ["kept"]}


def test_rows_of_a_table_of_scalars_are_copied_too() -> None:
    """A table whose schema holds only scalars is copied with a plain `dict`: still a copy,
    so changing a row read or put changes no state."""

    def put_flat(ctx: TxnContext) -> None:
        row: Record = {"n": 1}
        ctx.table("t").put(1, row)
        row["n"] = 2

    def mutate_flat(ctx: TxnContext) -> None:
        row = ctx.table("t").get(1)
        assert row is not None
        row["n"] = 99
        (scanned,) = (r for _, r in ctx.table("t").scan())
        scanned["n"] = 98
        boom(ctx)

    app = make_app({1: put_flat, 2: mutate_flat, 3: lambda ctx: None})
    base = FakeBase()
    engine = PartitionEngine(app.dataflow(), base, 0, app.params, flat_tables=frozenset({"t"}))
    for batch_id in (1, 2, 3):
        engine.process("a", batch_id, [{}])
    assert read(engine.group.ws, base, "t", (1,)) == {"n": 1}
    base.commit(engine.take_group())
    assert base.tables["t"] == {(1,): {"n": 1}}


def test_only_tables_of_scalars_are_flat(tmp_path: Path) -> None:
    schemas = tmp_path / "schemas"
    (schemas / "nested").mkdir(parents=True)
    (schemas / "nested" / "Row.avsc").write_text(json.dumps(ROW_SCHEMA))
    scalars = {
        "type": "record",
        "name": "Flat",
        "namespace": "nested",
        "fields": [
            {"name": "n", "type": ["null", "long"]},
            {"name": "s", "type": "string"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["a"]}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
    (schemas / "nested" / "Flat.avsc").write_text(json.dumps(scalars))
    app = make_app({})
    app.table("flat", schema="nested.Flat")
    codec = StateCodec(app.dataflow(), SchemaRegistry(schemas))
    assert "flat" in codec.flat_tables
    assert "t" not in codec.flat_tables


def test_a_window_column_is_its_visible_tuples_field_oldest_first(
    make_base: Callable[[App], Committing],
) -> None:
    seen: list[tuple[list[int], list[int]]] = []

    def insert_n(n: int) -> Action:
        def act(ctx: TxnContext) -> None:
            window = ctx.window("w")
            window.insert({"n": n, "tags": [str(n)]})
            seen.append((window.visible_column("n"), [t["n"] for t in window.visible()]))

        return act

    engine, _ = run(make_base, {i: insert_n(i * 10) for i in range(1, 6)}, {2, 4})
    assert engine.group.aborts == []
    assert [column for column, _ in seen] == [[10], [10, 20], [10, 20, 30], [20, 30, 40],
                                              [30, 40, 50]]  # fmt: skip
    assert all(column == tuples for column, tuples in seen)


def test_a_window_column_of_a_field_the_tuples_lack_aborts_naming_it(
    make_base: Callable[[App], Committing],
) -> None:
    def read_missing(ctx: TxnContext) -> None:
        ctx.window("w").visible_column("price")

    engine, _ = run(make_base, {1: insert_row, 2: read_missing}, set())
    (abort,) = engine.group.aborts
    assert abort.batch_id == 2
    assert "'w'" in abort.error and "'price'" in abort.error
