"""Small Delta commits the driver makes itself, with delta-rs: a mirror's changes, a few rows.

Spark's fixed cost per commit (planning, code generation, task set-up, its Delta commit) is
seconds on two cores, whatever the size: a mirror's MERGE was ~20 Spark jobs and 2.1-2.4 s, a
one-row append ~0.5-1 s, and they kept the driver's JVM busy while the facts' micro-batches
waited for CPU. What is small is written here in milliseconds instead: a mirror's micro-batch
(one change per key it touched, computed by Spark), a fact table's micro-batch of a live
stream (up to `config.DRIVER_ROWS`), the `etl_commits` row and the snapshot row. Each is one
Delta commit carrying the micro-batch's mark in `userMetadata`, which Spark, delta-rs and
`epochs.py` read alike (`docs/performance-history.md`, "Small commits by delta-rs"). A backfill's
large fact micro-batches, the quarantine and `etl_held` stay Spark's.

delta-rs commits by creating the next log file only if it does not exist, so its writers
never overwrite each other's commits: the queries' appends to `etl_commits`, from one driver
or two, need no lock (Spark's local log store does: `shared.py`). A commit that a
concurrent one refuses (`etl maintain`'s compaction) is made again: `conflicts.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from txstream_etl.conflicts import retried

FLAGS = ("_deleted", "_known")  # the change's own columns, beside the table's


def _q(name: str) -> str:
    """An identifier quoted for delta-rs' SQL, so a column named like a keyword still parses."""
    return '"' + name.replace('"', '""') + '"'


def append_rows(path: str, rows: pa.Table, mark: str) -> int:
    """Append the rows in one commit; return the table's version after it (the commit's own
    for a table only this query writes). A column the table lacks is added (a warehouse made
    before `etl_commits` had `versions`)."""
    append = functools.partial(_append_once, path, rows, mark)
    return retried(append, (CommitFailedError,), f"an append to {path}")


def _append_once(path: str, rows: pa.Table, mark: str) -> int:
    write_deltalake(
        path,
        rows,
        mode="append",
        schema_mode="merge",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": mark}),
    )
    return DeltaTable(path).version()


def merge_changes(
    path: str, changes: pa.Table, key: Sequence[str], dimension: bool, mark: str
) -> int:
    """Merge one change per key into the mirror; return the Delta version it made.

    `changes` has the table's columns (but `is_current`), `_deleted` (a tombstone) and
    `_known` (whether the key's last values are known, for a dimension's deleted row). A
    dimension keeps a deleted row with is_current = false and its last known values; other
    mirrors drop it. `mark` is the commit's `userMetadata`.
    """
    merge = functools.partial(_merge_once, path, changes, key, dimension, mark)
    return retried(merge, (CommitFailedError,), f"a merge into {path}")


def _merge_once(
    path: str, changes: pa.Table, key: Sequence[str], dimension: bool, mark: str
) -> int:
    target = DeltaTable(path)
    # Each comparison in parentheses: DataFusion's parser reads `a IS NOT DISTINCT FROM b AND
    # c` as `a IS NOT DISTINCT FROM (b AND c)`.
    on = " AND ".join(f"(t.{_q(k)} IS NOT DISTINCT FROM s.{_q(k)})" for k in key)
    data = [c for c in changes.column_names if c not in FLAGS]
    values = {_q(f): f"s.{_q(f)}" for f in data}
    merge = target.merge(
        changes,
        on,
        source_alias="s",
        target_alias="t",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": mark}),
    )
    if dimension:
        last_known = {_q(f): f"coalesce(s.{_q(f)}, t.{_q(f)})" for f in data}
        current = _q("is_current")
        merge = (
            merge.when_matched_update({**last_known, current: "false"}, predicate="s._deleted")
            .when_matched_update({**values, current: "true"})
            .when_not_matched_insert({**values, current: "false"}, "s._deleted AND s._known")
            .when_not_matched_insert({**values, current: "true"}, "NOT s._deleted")
        )
    else:
        merge = (
            merge.when_matched_delete("s._deleted")
            .when_matched_update(values)
            .when_not_matched_insert(values, "NOT s._deleted")
        )
    merge.execute()
    return target.version()
