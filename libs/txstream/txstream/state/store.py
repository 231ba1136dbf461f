"""RocksDB-backed state of one partition engine: a materialized cache of its changelog.

The changelog topic is the source of truth, so the store trades durability for speed: the
RocksDB write-ahead log is off. A crash (kill -9) then loses whatever was still in the memtable,
but never half of an `apply`: a write batch always lands in a single memtable, the store has a
single column family, and a flush persists whole memtables, so the data and the changelog
offsets recorded with it survive or vanish together. The engine reopens, reads the offset, and
catches up from the changelog. `memtable_bytes` bounds how much is lost, hence replayed.
`close` flushes, so a clean shutdown persists everything.

Offsets live in the same key space as the data, under `keys.RESERVED`, the one first byte that
`encode_key` never produces: a separate column family would break the atomicity argument above.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Checkpoint,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from txstream.model.errors import StateUnavailable
from txstream.state.keys import RESERVED

_OFFSET_PREFIX = RESERVED + b"offset:"
# Small, so that a flush is short: its background thread takes a core while it lasts, and
# on a busy machine every batch in hand waits that out (a 64 MB memtable's flush put
# 93-192 ms on a live worker's p99 at 5,000 batches/s; 8 MB, 53-66). Also bounds what a
# kill -9 loses, hence replays from the changelog.
_DEFAULT_MEMTABLE_BYTES = 8 << 20
_BLOCK_CACHE_BYTES = 64 << 20


class StateStoreError(StateUnavailable):
    """The store at `path` cannot be used; `StateStoreCorruption` says when wiping it helps."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"state store {path}: {problem}")
        self.path = path


class StateStoreCorruption(StateStoreError):
    """The files at `path` are damaged: wipe the store and rebuild it from the changelog.

    Other failures, such as the store being locked by another live engine, stay plain
    `StateStoreError`, because wiping then would destroy a store somebody else is using.
    """


class StateStoreLocked(StateStoreError):
    """Another engine on this host still holds the store, e.g. one handing the partition
    over in a rebalance: waiting helps, wiping would not."""


def _failure(path: Path, exc: Exception) -> StateStoreError:
    # rocksdict raises bare Exception carrying RocksDB's status text; its prefix is the code.
    text = str(exc)
    if "lock file" in text or "LOCK" in text:
        return StateStoreLocked(path, text)
    damaged = text.startswith("Corruption:") or "No such file or directory" in text
    return (StateStoreCorruption if damaged else StateStoreError)(path, text)


def _options(memtable_bytes: int) -> Options:
    # raw_mode: keys and values are bytes as given, not pickled with rocksdict's type prefix.
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.increase_parallelism(max(2, os.cpu_count() or 2))
    opts.set_write_buffer_size(memtable_bytes)
    opts.set_compression_type(DBCompressionType.lz4())
    # Every open rotates the info LOG; without a cap, restarts pile up LOG.old files.
    opts.set_keep_log_file_num(3)
    # Most reads of a row miss (a vote's first sighting): the memtable, which holds every
    # recent write, then answers from a bloom filter instead of walking its skip list
    # (an absent key 0.3-0.6 µs against 2.5-3.3). The filter costs 2% of a memtable.
    opts.set_memtable_whole_key_filtering(True)
    opts.set_memtable_prefix_bloom_ratio(0.02)
    table = BlockBasedOptions()
    # Bloom filters answer most get() of absent keys (a first write to a row) without I/O.
    table.set_bloom_filter(10, False)
    table.set_block_cache(Cache(_BLOCK_CACHE_BYTES))
    opts.set_block_based_table_factory(table)
    return opts


class StateStore:
    """Bytes-to-bytes table state plus the changelog offsets it reflects."""

    def __init__(self, db: Rdict, path: Path) -> None:
        self._db = db
        self._path = path
        self._closed = False

    @classmethod
    def open(cls, path: Path, *, memtable_bytes: int = _DEFAULT_MEMTABLE_BYTES) -> StateStore:
        try:
            path.mkdir(parents=True, exist_ok=True)
            db = Rdict(str(path), _options(memtable_bytes))
        except Exception as exc:
            raise _failure(path, exc) from exc
        write_opts = WriteOptions()
        # A property at runtime, though rocksdict's stub declares a method that raises TypeError.
        write_opts.disable_wal = True  # type: ignore[method-assign,assignment]
        db.set_write_options(write_opts)
        return cls(db, path)

    @property
    def path(self) -> Path:
        return self._path

    def close(self) -> None:
        """Flush the memtable (there is no WAL to replay it from) and release the lock."""
        if self._closed:
            return
        try:
            self._db.flush(wait=True)
            self._db.close()
        except Exception as exc:
            raise _failure(self._path, exc) from exc
        self._closed = True

    def __enter__(self) -> StateStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def get(self, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._db.get(key)
        except Exception as exc:
            raise _failure(self._path, exc) from exc
        return value

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Yield the entries whose key starts with `prefix`, in key order, metadata excluded."""
        if prefix.startswith(RESERVED):
            raise ValueError(f"prefix {prefix!r} is in the reserved metadata namespace")
        try:
            it = self._db.iter()
            it.seek(prefix)
            while it.valid():
                key: bytes = it.key()
                if not key.startswith(prefix) or key >= RESERVED:
                    return
                yield key, it.value()
                it.next()
            # An iterator stops being valid on a read error too, and says so only here.
            it.status()
        except Exception as exc:
            raise _failure(self._path, exc) from exc

    def apply(self, writes: Mapping[bytes, bytes | None], offsets: Mapping[str, int]) -> None:
        """Write `writes` (None deletes) and record `offsets`, all or nothing."""
        batch = WriteBatch(raw_mode=True)
        for key, value in writes.items():
            if key.startswith(RESERVED):
                raise ValueError(f"key {key!r} is in the reserved metadata namespace")
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        for name, offset in offsets.items():
            batch.put(_offset_key(name), offset.to_bytes(8, "big", signed=True))
        try:
            self._db.write(batch)
        except Exception as exc:
            raise _failure(self._path, exc) from exc

    def offset(self, name: str) -> int | None:
        """The offset last recorded under `name` by `apply`, if any."""
        try:
            raw: bytes | None = self._db.get(_offset_key(name))
        except Exception as exc:
            raise _failure(self._path, exc) from exc
        return None if raw is None else int.from_bytes(raw, "big", signed=True)

    def checkpoint(self, dest: Path) -> None:
        """Write a consistent copy to `dest` (which must not exist), memtable included.

        Files are hard-linked where `dest` shares the filesystem, so this is cheap.
        """
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            Checkpoint(self._db).create_checkpoint(str(dest))
        except Exception as exc:
            raise _failure(dest, exc) from exc

    @staticmethod
    def restore(checkpoint: Path, path: Path) -> None:
        """Replace the store at `path` (closed) with a copy of `checkpoint`.

        The copy is made beside `path` and renamed into place, so a crash midway leaves either
        the old store or none, never a half-copied one that would open.
        """
        if not (checkpoint / "CURRENT").is_file():
            raise StateStoreError(checkpoint, "not a checkpoint (no CURRENT file)")
        staging = path.with_name(path.name + ".restoring")
        StateStore.wipe(staging)
        shutil.copytree(checkpoint, staging)
        StateStore.wipe(path)
        staging.rename(path)

    @staticmethod
    def wipe(path: Path) -> None:
        """Delete the store at `path` (closed), if any, so it can be rebuilt from scratch."""
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _offset_key(name: str) -> bytes:
    return _OFFSET_PREFIX + name.encode()
