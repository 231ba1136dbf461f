"""Bring RocksDB up to the committed end of the changelog before any new work.

Call it only after the engine's transactional producer has run init_transactions: that
aborts whatever its previous incarnation left open, so the read_committed end of the
changelog is final and the catch-up below terminates.
"""

from __future__ import annotations

from collections.abc import Callable

from txstream.config import Settings
from txstream.kafka.read import read_to_committed_end
from txstream.model.declarations import Key, Record
from txstream.state.codec import StateCodec, table_rows
from txstream.state.committed import CommittedState


def restore(
    state: CommittedState,
    settings: Settings,
    changelog: str,
    partition: int,
    *,
    timeout_s: float = 300.0,
    apply_every: int = 20_000,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Apply changelog records from RocksDB's recorded offset to the end; returns the count."""
    pending: dict[bytes, bytes | None] = {}
    next_offset, applied = state.log_offset(), 0
    records = read_to_committed_end(
        settings, changelog, partition, next_offset, timeout_s=timeout_s
    )
    for msg in records:
        key = msg.key()
        if key is None:
            continue
        pending[key] = msg.value()
        next_offset = (msg.offset() or 0) + 1
        applied += 1
        if len(pending) >= apply_every:
            state.apply(pending, next_offset)
            pending = {}
            if progress is not None:
                progress(applied)
    if pending:
        state.apply(pending, next_offset)
        if progress is not None:
            progress(applied)
    return applied


def committed_tables(
    settings: Settings, codec: StateCodec, changelog: str, partitions: int
) -> dict[str, dict[Key, Record]]:
    """Every partition's committed rows, merged (a key lives on one partition), rebuilt
    from the changelog alone: what a reader outside the engines sees as committed state."""
    tables: dict[str, dict[Key, Record]] = {}
    for p in range(partitions):
        for table, rows in partition_tables(settings, codec, changelog, p).items():
            tables.setdefault(table, {}).update(rows)
    return tables


def partition_tables(
    settings: Settings, codec: StateCodec, changelog: str, partition: int
) -> dict[str, dict[Key, Record]]:
    """One partition engine's committed rows, from its changelog partition."""
    state: dict[bytes, bytes] = {}
    for msg in read_to_committed_end(settings, changelog, partition):
        key, value = msg.key(), msg.value()
        if key is None:
            continue
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return table_rows(codec, state)
