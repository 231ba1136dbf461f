"""An engine's recent before-images: its rows taken back to right after an earlier batch."""

from __future__ import annotations

import pytest

from txstream.engine import history as history_mod
from txstream.engine.history import History, TooOld
from txstream.engine.writeset import TOMBSTONE, WriteSet
from txstream.model.declarations import Key, Record
from txstream.testing import MemoryState


def write(
    h: History, group: WriteSet, base: MemoryState, batch: int | None = None, **rows: int | None
) -> None:
    """One TE's writes to table t (None deletes), merged into the group as the engine does:
    spanning batch `batch`'s, or (None) a TE or transaction of this engine's own."""
    ws = WriteSet(group)
    for key, value in rows.items():
        ws.put("t", (key,), TOMBSTONE if value is None else {"v": value})
    h.running = batch
    h.record(ws, group, base)
    h.running = None
    ws.merge_into(group)


def now(group: WriteSet, base: MemoryState) -> dict[Key, Record]:
    rows = dict(base.scan("t", ()))
    for k, v in group.tables.get("t", {}).items():
        if v is TOMBSTONE:
            rows.pop(k, None)
        else:
            rows[k] = v
    return rows


def test_rows_go_back_to_the_point_right_after_a_batch() -> None:
    base = MemoryState()
    base.tables["t"] = {("a",): {"v": 1}, ("b",): {"v": 2}}
    group = WriteSet()
    h = History(5, frozenset({"t"}))
    h.asked()
    write(h, group, base, 6, a=10)
    h.passed(6)
    write(h, group, base, b=None, c=3)  # an OLTP write after batch 6: point 6 holds it
    write(h, group, base, 7, a=11)
    h.passed(7)
    write(h, group, base, 8, c=4)
    h.passed(8)
    assert h.rows_at(8, "t", now(group, base)) == {("a",): {"v": 11}, ("c",): {"v": 4}}
    assert h.rows_at(7, "t", now(group, base)) == {("a",): {"v": 11}, ("c",): {"v": 3}}
    assert h.rows_at(6, "t", now(group, base)) == {("a",): {"v": 10}, ("c",): {"v": 3}}
    assert h.rows_at(5, "t", now(group, base)) == {("a",): {"v": 1}, ("b",): {"v": 2}}
    # one key: only that key's before-images count
    assert h.rows_at(5, "t", {}, ("b",)) == {("b",): {"v": 2}}
    assert h.rows_at(6, "t", {}, ("b",)) == {}


def test_other_tables_are_not_kept_and_a_point_before_the_start_is_refused() -> None:
    base, group = MemoryState(), WriteSet()
    h = History(None, frozenset({"t"}))
    h.asked()
    other = WriteSet(group)
    other.put("u", ("x",), {"v": 1})
    h.record(other, group, base)
    write(h, group, base, a=1)  # loaded before the first batch: part of every point
    write(h, group, base, 1, a=2)
    h.passed(1)
    assert h.rows_at(-1, "t", now(group, base)) == {("a",): {"v": 1}}
    assert h.rows_at(1, "t", now(group, base)) == {("a",): {"v": 2}}
    restarted = History(1, frozenset({"t"}))
    restarted.asked()
    with pytest.raises(TooOld, match=r"spanning batch 0 is older.*batch 1"):
        restarted.rows_at(0, "t", {})


def test_only_the_newest_before_images_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history_mod, "LIMIT", 3)
    base, group = MemoryState(), WriteSet()
    h = History(0, frozenset({"t"}))
    h.asked()
    for batch in range(1, 5):
        write(h, group, base, batch, a=batch)
        h.passed(batch)
    # batch 1's write was dropped: the state before it (right after batch 0) is gone
    assert h.floor == 1
    assert h.rows_at(1, "t", now(group, base)) == {("a",): {"v": 1}}
    with pytest.raises(TooOld):
        h.rows_at(0, "t", now(group, base))


def test_before_images_are_kept_from_the_first_query_until_queries_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = History(3, frozenset({"t"}))
    assert not h.recording  # no query yet: the engine keeps nothing
    h.passed(4)
    h.asked()  # the first query is answered as of batch 4, and every later cut is newer
    assert (h.recording, h.floor) == (True, 4)
    with pytest.raises(TooOld):
        h.rows_at(3, "t", {})
    monkeypatch.setattr(history_mod, "KEEP_S", -1.0)
    h.asked()
    base, group = MemoryState(), WriteSet()
    write(h, group, base, 5, a=1)
    h.passed(5)  # no query for KEEP_S: stop, and drop what was kept
    assert not h.recording
    with pytest.raises(TooOld):
        h.rows_at(4, "t", now(group, base))
