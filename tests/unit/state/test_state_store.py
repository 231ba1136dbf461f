"""StateStore: atomic apply with offsets, scans, persistence, checkpoints, corruption."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from txstream.state.keys import RESERVED, Key, encode_key, prefix
from txstream.state.store import StateStore, StateStoreCorruption, StateStoreError

OFFSET = "changelog:leaderboard.changelog:0"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore.open(tmp_path / "db")
    yield s
    s.close()


def filled(path: Path, rows: int = 2000) -> None:
    """A closed store whose rows went to SST files (close flushes), with an offset."""
    with StateStore.open(path) as s:
        s.apply({encode_key(("t", i)): b"v" * 40 for i in range(rows)}, {OFFSET: rows})


def test_apply_get_delete(store: StateStore) -> None:
    store.apply({b"\x10a": b"1", b"\x10b": b"2"}, {})
    store.apply({b"\x10a": None, b"\x10c": b"3"}, {})
    assert store.get(b"\x10a") is None
    assert store.get(b"\x10b") == b"2"
    assert store.get(b"\x10c") == b"3"


def test_offsets_and_data_persist_together_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with StateStore.open(path) as s:
        s.apply({b"\x10k": b"v1"}, {OFFSET: 10, "other": -1})
        s.apply({b"\x10k": b"v2", b"\x10gone": b"x"}, {OFFSET: 11})
        s.apply({b"\x10gone": None}, {OFFSET: 12})
    with StateStore.open(path) as s:
        assert s.offset(OFFSET) == 12
        assert s.offset("other") == -1
        assert s.offset("never") is None
        assert s.get(b"\x10k") == b"v2"
        assert s.get(b"\x10gone") is None


def test_crash_keeps_data_and_offsets_consistent(tmp_path: Path) -> None:
    """Without a WAL, kill -9 loses the memtable; what survives must be a whole prefix of applies.

    A small memtable forces many flushes while writing, so the crash lands between them.
    """
    path = tmp_path / "db"
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from txstream.state.store import StateStore
        s = StateStore.open(Path({str(path)!r}), memtable_bytes=64 * 1024)
        for n in range(1, 3001):
            writes = {{b"\\x10row%05d-%d" % (n, j): b"x" * 100 for j in range(8)}}
            writes[b"\\x10count"] = b"%d" % n
            s.apply(writes, {{{OFFSET!r}: n}})
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with StateStore.open(path) as s:
        reached = s.offset(OFFSET)
        assert reached is not None, "no flush happened; the test exercised nothing"
        assert reached < 3000, "everything survived; the crash exercised nothing"
        assert s.get(b"\x10count") == b"%d" % reached
        rows = [k for k, _ in s.scan(b"\x10row")]
        assert len(rows) == 8 * reached
        assert rows[-1].startswith(b"\x10row%05d" % reached)


def test_scan_yields_prefix_in_key_order(store: StateStore) -> None:
    rng = random.Random(11)
    keys: list[Key] = [("votes_by_contestant", c, v) for c in (6, 7, 8, -7) for v in range(-20, 20)]
    keys += [("votes",), ("votes_by_contestant",), ("votes_by_contestant\x00", 7, 1)]
    rng.shuffle(keys)
    store.apply({encode_key(k): repr(k).encode() for k in keys}, {OFFSET: 1})
    store.apply({encode_key(("votes_by_contestant", 7, 0)): None}, {})

    expected = [("votes_by_contestant", 7, v) for v in range(-20, 20) if v != 0]
    assert list(store.scan(prefix(("votes_by_contestant", 7)))) == [
        (encode_key(k), repr(k).encode()) for k in expected
    ]


def test_scan_everything_excludes_metadata(store: StateStore) -> None:
    store.apply({encode_key((b"\xff\xff",)): b"last", encode_key((1,)): b"first"}, {OFFSET: 5})
    assert [v for _, v in store.scan(b"")] == [b"first", b"last"]
    assert list(store.scan(encode_key(("absent",)))) == []


def test_reserved_namespace_is_refused(store: StateStore) -> None:
    with pytest.raises(ValueError):
        store.apply({b"\x10ok": b"1", RESERVED + b"offset:" + OFFSET.encode(): b"x"}, {})
    assert store.get(b"\x10ok") is None
    with pytest.raises(ValueError):
        list(store.scan(RESERVED))


def test_checkpoint_and_restore_round_trip(tmp_path: Path) -> None:
    path, snap = tmp_path / "db", tmp_path / "snaps" / "s1"
    with StateStore.open(path) as s:
        s.apply({b"\x10a": b"1", b"\x10b": b"2"}, {OFFSET: 7})
        s.checkpoint(snap)  # memtable only: no WAL, nothing flushed yet
        s.apply({b"\x10a": b"changed", b"\x10b": None, b"\x10c": b"3"}, {OFFSET: 9})
        with pytest.raises(StateStoreError, match="s1"):
            s.checkpoint(snap)

    StateStore.restore(snap, path)
    with StateStore.open(path) as s:
        assert s.offset(OFFSET) == 7
        assert list(s.scan(b"")) == [(b"\x10a", b"1"), (b"\x10b", b"2")]
        s.apply({b"\x10d": b"4"}, {})
    with StateStore.open(snap) as s:
        assert s.get(b"\x10d") is None, "the restored store must not share files with the snapshot"


def test_restore_refuses_a_directory_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(StateStoreError, match="empty"):
        StateStore.restore(tmp_path / "empty", tmp_path / "db")


def _corrupt_current(path: Path) -> None:
    (path / "CURRENT").write_bytes(b"\x00garbage")


def _corrupt_manifest(path: Path) -> None:
    next(path.glob("MANIFEST-*")).write_bytes(random.Random(1).randbytes(300))


def _delete_manifest(path: Path) -> None:
    next(path.glob("MANIFEST-*")).unlink()


def _truncate_sst(path: Path) -> None:
    os.truncate(next(path.glob("*.sst")), 100)


@pytest.mark.parametrize(
    "damage", [_corrupt_current, _corrupt_manifest, _delete_manifest, _truncate_sst]
)
def test_corrupt_store_fails_to_open_then_wipe_rebuilds(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    path = tmp_path / "db"
    filled(path)
    damage(path)
    with pytest.raises(StateStoreCorruption, match=str(path)):
        StateStore.open(path)

    StateStore.wipe(path)
    assert not path.exists()
    with StateStore.open(path) as s:
        assert s.offset(OFFSET) is None
        assert list(s.scan(b"")) == []


def test_damaged_block_surfaces_on_read_not_as_an_empty_scan(tmp_path: Path) -> None:
    path = tmp_path / "db"
    filled(path)
    sst = next(path.glob("*.sst"))
    data = bytearray(sst.read_bytes())
    data[10] ^= 0xFF  # inside the first data block; open only reads footer, index and filter
    sst.write_bytes(bytes(data))
    with StateStore.open(path) as s:
        with pytest.raises(StateStoreCorruption, match="checksum"):
            list(s.scan(b""))
        with pytest.raises(StateStoreCorruption):
            s.get(encode_key(("t", 0)))


def test_locked_store_is_an_error_but_not_corruption(store: StateStore) -> None:
    with pytest.raises(StateStoreError, match="lock") as info:
        StateStore.open(store.path)
    assert not isinstance(info.value, StateStoreCorruption)


def test_closed_store_refuses_reads_and_close_is_idempotent(tmp_path: Path) -> None:
    s = StateStore.open(tmp_path / "db")
    s.close()
    s.close()
    with pytest.raises(StateStoreError):
        s.get(b"\x10a")


def test_wipe_missing_path_is_a_no_op(tmp_path: Path) -> None:
    StateStore.wipe(tmp_path / "nothing")
    assert not (tmp_path / "nothing").exists()


def test_path_that_is_a_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "db").write_text("not a store")
    with pytest.raises(StateStoreError, match="db"):
        StateStore.open(tmp_path / "db")
