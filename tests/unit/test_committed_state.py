"""CommittedState over a real RocksDB: cached rows and scans follow every applied group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leaderboard.dataflow import Params, build_app
from txstream.config import Settings
from txstream.model.declarations import Key, Record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.state.committed import CommittedState
from txstream.state.store import StateStore


@pytest.fixture
def state(tmp_path: Path) -> Iterator[CommittedState]:
    app = build_app(Params(contestants=5, threshold=10, window=4, slide=2))
    codec = StateCodec(app.dataflow(), SchemaRegistry(Settings().schema_dir))
    store = StateStore.open(tmp_path / "db")
    yield CommittedState(store, codec)
    store.close()


def write(
    state: CommittedState, table: str, rows: dict[Key, Record | None]
) -> dict[bytes, bytes | None]:
    codec = state.codec
    return {
        codec.key(table, k): None if row is None else codec.encode_row(table, row)
        for k, row in rows.items()
    }


def test_a_cached_scan_sees_each_applied_write_of_its_table(state: CommittedState) -> None:
    state.apply(write(state, "trending", {(1,): {"value": 3}, (2,): {"value": 5}}), 1)
    assert list(state.scan("trending", ())) == [((1,), {"value": 3}), ((2,), {"value": 5})]

    writes = write(state, "trending", {(1,): None, (3,): {"value": 1}})
    state.apply(writes, 2, tables={"trending"})
    assert list(state.scan("trending", ())) == [((2,), {"value": 5}), ((3,), {"value": 1})]

    state.apply(write(state, "stats", {("accepted",): {"value": 9}}), 3, tables={"stats"})
    assert list(state.scan("trending", ())) == [((2,), {"value": 5}), ((3,), {"value": 1})]
    assert list(state.scan("stats", ())) == [(("accepted",), {"value": 9})]


def test_an_apply_that_names_no_tables_drops_every_cached_scan(state: CommittedState) -> None:
    state.apply(write(state, "trending", {(1,): {"value": 3}}), 1)
    assert [k for k, _ in state.scan("trending", ())] == [(1,)]
    state.apply(write(state, "trending", {(4,): {"value": 2}}), 2)  # as recovery applies
    assert [k for k, _ in state.scan("trending", ())] == [(1,), (4,)]


def test_prefix_scans_are_cached_apart(state: CommittedState) -> None:
    rows: dict[Key, Record | None] = {(n, v): {} for n in (1, 2) for v in (10, 20)}
    state.apply(write(state, "votes_by_contestant", rows), 1)
    assert [k for k, _ in state.scan("votes_by_contestant", (1,))] == [(1, 10), (1, 20)]
    assert [k for k, _ in state.scan("votes_by_contestant", (2,))] == [(2, 10), (2, 20)]
    more = write(state, "votes_by_contestant", {(2, 30): {}, (1, 10): None})
    state.apply(more, 2, tables={"votes_by_contestant"})
    assert [k for k, _ in state.scan("votes_by_contestant", (1,))] == [(1, 20)]
    assert [k for k, _ in state.scan("votes_by_contestant", (2,))] == [(2, 10), (2, 20), (2, 30)]


def test_group_writes_encode_as_their_keys_and_rows_do_one_by_one(state: CommittedState) -> None:
    from txstream.engine.writeset import TOMBSTONE, WriteSet
    from txstream.state.keys import encode_key

    codec = state.codec
    ws = WriteSet()
    ws.put("seen_vote_ids", (5,), {})  # a record of no fields
    ws.put("stats", ("accepted",), {"value": 3})
    ws.put("votes_by_contestant", (3, 7), TOMBSTONE)
    assert codec.encode_writes(ws) == {
        encode_key(("seen_vote_ids", 5)): codec.encode_row("seen_vote_ids", {}),
        encode_key(("stats", "accepted")): codec.encode_row("stats", {"value": 3}),
        encode_key(("votes_by_contestant", 3, 7)): None,
    }
    assert codec.decode_row("seen_vote_ids", b"") == {}
