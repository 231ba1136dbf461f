"""CommittedState over a real RocksDB: cached rows and scans follow every applied group."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from leaderboard.dataflow import Params, build_app
from txstream.config import Settings
from txstream.engine.windows import WindowState
from txstream.engine.writeset import TOMBSTONE, WriteSet
from txstream.model.declarations import Key, Record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import EncodedWrites, StateCodec
from txstream.state.committed import CommittedState
from txstream.state.store import StateStore


@pytest.fixture
def state(tmp_path: Path) -> Iterator[CommittedState]:
    app = build_app(Params(contestants=5, threshold=10, window=4, slide=2))
    codec = StateCodec(app.dataflow(), SchemaRegistry(Settings().schema_dir))
    store = StateStore.open(tmp_path / "db")
    yield CommittedState(store, codec)
    store.close()


def write(state: CommittedState, table: str, rows: dict[Key, Record | None]) -> EncodedWrites:
    """A group's writes of `rows` (None deletes), encoded as the group commit encodes them."""
    ws = WriteSet()
    for k, row in rows.items():
        ws.put(table, k, TOMBSTONE if row is None else row)
    return state.codec.encode_writes(ws)


def as_recovery(writes: EncodedWrites) -> dict[bytes, bytes | None]:
    """The same entries as recovery applies them: read off the changelog, keys as bytes."""
    return dict(writes)


def vote(vote_id: int) -> Record:
    return {"vote_id": vote_id, "phone_number": 5551234, "contestant_number": 1, "state": "MA"}


class CountingGets:
    """Counts the reads that reach RocksDB."""

    def __init__(self, state: CommittedState) -> None:
        self.calls = 0
        self.get = state.store.get
        state.store.get = self  # type: ignore[method-assign]

    def __call__(self, key: bytes) -> bytes | None:
        self.calls += 1
        return self.get(key)


def test_a_cached_scan_sees_each_applied_write_of_its_table(state: CommittedState) -> None:
    state.apply(write(state, "trending", {(1,): {"value": 3}, (2,): {"value": 5}}), 1)
    assert list(state.scan("trending", ())) == [((1,), {"value": 3}), ((2,), {"value": 5})]

    state.apply(write(state, "trending", {(1,): None, (3,): {"value": 1}}), 2)
    assert list(state.scan("trending", ())) == [((2,), {"value": 5}), ((3,), {"value": 1})]

    state.apply(write(state, "stats", {("accepted",): {"value": 9}}), 3)
    assert list(state.scan("trending", ())) == [((2,), {"value": 5}), ((3,), {"value": 1})]
    assert list(state.scan("stats", ())) == [(("accepted",), {"value": 9})]


def test_recoverys_writes_empty_every_cache(state: CommittedState) -> None:
    state.apply(write(state, "trending", {(1,): {"value": 3}}), 1)
    ws = WriteSet()
    ws.windows["trending_window"] = WindowState((vote(1),), ())
    state.apply(state.codec.encode_writes(ws), 2)
    assert [k for k, _ in state.scan("trending", ())] == [(1,)]
    assert state.get("trending", (1,)) == {"value": 3}
    assert state.get("stats", ("accepted",)) is None
    window = state.window("trending_window")
    assert window is not None and window.staged == (vote(1),)

    recovered = write(state, "trending", {(1,): {"value": 7}, (4,): {"value": 2}})
    ws.windows["trending_window"] = WindowState((), (vote(2),))
    recovered.update(as_recovery(state.codec.encode_writes(ws)))
    recovered.update(as_recovery(write(state, "stats", {("accepted",): {"value": 1}})))
    state.apply(as_recovery(recovered), 3)
    assert [k for k, _ in state.scan("trending", ())] == [(1,), (4,)]
    assert state.get("trending", (1,)) == {"value": 7}
    assert state.get("stats", ("accepted",)) == {"value": 1}
    window = state.window("trending_window")
    assert window is not None and window.visible == (vote(2),)


def test_a_row_read_then_written_is_read_back_as_rocksdb_holds_it_without_reading_rocksdb(
    state: CommittedState,
) -> None:
    state.apply(write(state, "stats", {("accepted",): {"value": 1}}), 1)
    gets = CountingGets(state)
    assert state.get("stats", ("accepted",)) == {"value": 1}
    assert gets.calls == 1

    # Put as a procedure might: a field the schema lacks. RocksDB holds the row without it,
    # and that is what the next group reads, from the cache.
    put = {"value": 2, "note": "not in the schema"}
    state.apply(write(state, "stats", {("accepted",): put}), 2)
    assert state.get("stats", ("accepted",)) == {"value": 2}
    state.apply(write(state, "stats", {("accepted",): {"value": 3}}), 3)
    assert state.get("stats", ("accepted",)) == {"value": 3}
    assert gets.calls == 1
    state.apply(write(state, "stats", {("accepted",): None}), 4)
    assert state.get("stats", ("accepted",)) is None
    assert gets.calls == 1
    assert state.store.get(state.codec.key("stats", ("accepted",))) is None


def test_a_key_read_while_absent_is_read_again_once_inserted(state: CommittedState) -> None:
    gets = CountingGets(state)
    assert state.get("seen_vote_ids", (7,)) is None
    state.apply(write(state, "seen_vote_ids", {(7,): {}}), 1)
    assert state.get("seen_vote_ids", (7,)) == {}
    assert gets.calls == 2  # not kept on insert: an id is checked once, then never again
    assert state.get("seen_vote_ids", (7,)) == {}
    assert gets.calls == 2


def test_the_row_cache_is_emptied_when_full(tmp_path: Path) -> None:
    app = build_app(Params(contestants=5, threshold=10, window=4, slide=2))
    codec = StateCodec(app.dataflow(), SchemaRegistry(Settings().schema_dir))
    with StateStore.open(tmp_path / "db") as store:
        state = CommittedState(store, codec, cache_size=3)
        state.apply(write(state, "stats", {(n,): {"value": n} for n in range(5)}), 1)
        gets = CountingGets(state)
        for n in range(5):
            assert state.get("stats", (n,)) == {"value": n}
        assert gets.calls == 5
        assert state.get("stats", (4,)) == {"value": 4}  # cached after the emptying
        assert state.get("stats", (0,)) == {"value": 0}  # emptied with the rest
        assert gets.calls == 6


def test_a_written_window_is_read_back_without_reading_rocksdb(state: CommittedState) -> None:
    gets = CountingGets(state)
    assert state.window("trending_window") is None
    ws = WriteSet()
    ws.windows["trending_window"] = WindowState((vote(1),), ())
    state.apply(state.codec.encode_writes(ws), 1)
    window = state.window("trending_window")
    assert window is not None and window.staged == (vote(1),)
    assert gets.calls == 1


def test_prefix_scans_are_cached_apart(state: CommittedState) -> None:
    rows: dict[Key, Record | None] = {(n, v): {} for n in (1, 2) for v in (10, 20)}
    state.apply(write(state, "votes_by_contestant", rows), 1)
    assert [k for k, _ in state.scan("votes_by_contestant", (1,))] == [(1, 10), (1, 20)]
    assert [k for k, _ in state.scan("votes_by_contestant", (2,))] == [(2, 10), (2, 20)]
    more = write(state, "votes_by_contestant", {(2, 30): {}, (1, 10): None})
    state.apply(more, 2)
    assert [k for k, _ in state.scan("votes_by_contestant", (1,))] == [(1, 20)]
    assert [k for k, _ in state.scan("votes_by_contestant", (2,))] == [(2, 10), (2, 20), (2, 30)]


def test_group_writes_encode_as_their_keys_and_rows_do_one_by_one(state: CommittedState) -> None:
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
    assert codec.encode_writes(ws).origins == [
        ("seen_vote_ids", (5,)),
        ("stats", ("accepted",)),
        ("votes_by_contestant", (3, 7)),
    ]
    assert codec.decode_row("seen_vote_ids", b"") == {}


class CountingScans:
    """Counts the scans that reach RocksDB."""

    def __init__(self, state: CommittedState) -> None:
        self.calls = 0
        self.scan = state.store.scan
        state.store.scan = self  # type: ignore[method-assign]

    def __call__(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        self.calls += 1
        return self.scan(prefix)


def fresh_scan(state: CommittedState, table: str, prefix: Key) -> list[tuple[Key, Record]]:
    """What a scan reads from RocksDB itself, through no cache."""
    return list(CommittedState(state.store, state.codec).scan(table, prefix))


def test_a_cached_scan_takes_its_tables_writes_without_reading_rocksdb_again(
    state: CommittedState,
) -> None:
    state.apply(write(state, "trending", {(k,): {"value": k} for k in (2, 4, 6)}), 1)
    scans = CountingScans(state)
    assert [k for k, _ in state.scan("trending", ())] == [(2,), (4,), (6,)]
    assert scans.calls == 1
    # a slide's recount: rows rewritten, one inserted between two, one deleted; and one
    # put with a field the schema lacks, which the cache holds as RocksDB does
    put: dict[Key, Record | None] = {
        (2,): {"value": 20},
        (3,): {"value": 3},
        (6,): None,
        (4,): {"value": 4, "x": 1},
    }
    state.apply(write(state, "trending", put), 2)
    cached = list(state.scan("trending", ()))
    assert scans.calls == 1
    assert cached == [((2,), {"value": 20}), ((3,), {"value": 3}), ((4,), {"value": 4})]
    assert cached == fresh_scan(state, "trending", ())


def test_cached_prefix_scans_follow_random_writes(state: CommittedState) -> None:
    rng = random.Random(7)
    table = "votes_by_contestant"  # keyed (contestant, vote id): scanned by contestant
    for offset in range(1, 40):
        for contestant in range(3):
            assert list(state.scan(table, (contestant,))) == fresh_scan(state, table, (contestant,))
        assert list(state.scan(table, ())) == fresh_scan(state, table, ())
        rows: dict[Key, Record | None] = {}
        for _ in range(rng.randint(0, 6)):
            key = (rng.randrange(3), rng.randrange(12))
            rows[key] = None if rng.random() < 0.3 else {}
        state.apply(write(state, table, rows), offset)


def test_a_scan_gives_each_rows_key_as_written(state: CommittedState) -> None:
    """Keys of several parts, read back from RocksDB past the table's own part."""
    table = "votes_by_contestant"
    state.apply(write(state, table, {(2, 3): {}, (1, 7): {}, (1, -5): {}}), 1)
    assert [k for k, _ in fresh_scan(state, table, ())] == [(1, -5), (1, 7), (2, 3)]
    assert [k for k, _ in fresh_scan(state, table, (1,))] == [(1, -5), (1, 7)]
    state.apply(write(state, "stats", {("accepted",): {"value": 9}}), 2)
    assert fresh_scan(state, "stats", ()) == [(("accepted",), {"value": 9})]
