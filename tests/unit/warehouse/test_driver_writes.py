"""The driver's delta-rs commits: a mirror's changes merged as Spark's MERGE did, rows appended."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from txstream_etl import driver_writes
from txstream_etl.driver_writes import append_rows, merge_changes

SCHEMA = pa.schema([("counter", pa.string()), ("value", pa.int64()), ("etl_batch", pa.int64())])


def changes(rows: list[tuple[str, int | None, bool, bool]], batch: int) -> pa.Table:
    """(key, value, deleted, known) per key, as `writer._mirror_rows` gives them."""
    return pa.table({
        "counter": [r[0] for r in rows],
        "value": pa.array([r[1] for r in rows], pa.int64()),
        "etl_batch": pa.array([batch] * len(rows), pa.int64()),
        "_deleted": [r[2] for r in rows],
        "_known": [r[3] for r in rows],
    })  # fmt: skip


def state(path: Path) -> dict[str, tuple[object, ...]]:
    out = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return {r["counter"]: tuple(v for k, v in r.items() if k != "counter") for r in out}


def test_a_mirror_takes_updates_inserts_and_deletes(tmp_path: Path) -> None:
    path = tmp_path / "stats"
    write_deltalake(str(path), pa.table({"counter": ["a", "b"], "value": [1, 2],
                                          "etl_batch": [0, 0]}, SCHEMA))  # fmt: skip
    version = merge_changes(
        str(path), changes([("a", 5, False, True), ("b", None, True, False),
                            ("c", 7, False, True), ("d", None, True, False)], 1),
        ["counter"], False, "txstream-etl:app:changelog:1",
    )  # fmt: skip
    assert state(path) == {"a": (5, 1), "c": (7, 1)}
    history = DeltaTable(str(path)).history(1)[0]
    assert (version, history["userMetadata"]) == (1, "txstream-etl:app:changelog:1")


def test_a_dimension_keeps_a_deleted_row_with_its_last_known_values(tmp_path: Path) -> None:
    path = tmp_path / "contestants"
    schema = SCHEMA.append(pa.field("is_current", pa.bool_()))
    write_deltalake(str(path), pa.table({"counter": ["a", "b"], "value": [1, 2],
                                          "etl_batch": [0, 0], "is_current": [True, True]},
                                         schema))  # fmt: skip
    merge_changes(
        str(path),
        changes([
            ("a", None, True, False),  # deleted: keeps 1, no longer current
            ("b", 9, False, True),  # updated
            ("c", 3, True, True),  # added and deleted in one micro-batch: kept, not current
            ("d", None, True, False),  # deleted, never seen: nothing to keep
            ("e", 4, False, True),  # added
        ], 1),
        ["counter"], True, "m",
    )  # fmt: skip
    assert state(path) == {
        "a": (1, 1, False),
        "b": (9, 1, True),
        "c": (3, 1, False),
        "e": (4, 1, True),
    }


def test_keys_of_two_columns_compare_null_safely(tmp_path: Path) -> None:
    """Each key column compares null-safely, as Spark's `<=>` did: a change to a key with a
    null part updates its row instead of adding one."""
    path = tmp_path / "stats"
    schema = pa.schema([("counter", pa.string()), ("detail", pa.string()), ("value", pa.int64())])
    before = {"counter": ["accepted", "rejected"], "detail": [None, "duplicate"], "value": [1, 2]}
    write_deltalake(str(path), pa.table(before, schema))
    change = {"counter": ["accepted", "rejected"], "detail": pa.array([None, "over"], pa.string()),
              "value": [5, 3], "_deleted": [False, False], "_known": [True, True]}  # fmt: skip
    merge_changes(str(path), pa.table(change), ["counter", "detail"], False, "m")
    after = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    assert sorted(after, key=lambda r: (r["counter"], r["detail"] or "")) == [
        {"counter": "accepted", "detail": None, "value": 5},
        {"counter": "rejected", "detail": "duplicate", "value": 2},
        {"counter": "rejected", "detail": "over", "value": 3},
    ]


def test_an_append_adds_a_column_the_table_lacks(tmp_path: Path) -> None:
    """`etl_commits` gained `versions`: a warehouse made before takes the new rows whole."""
    path = tmp_path / "etl_commits"
    write_deltalake(str(path), pa.table({"query": ["streams"], "etl_batch": [0]}))
    versions = pa.map_(pa.string(), pa.int64())
    row = pa.table({"query": ["streams"], "etl_batch": [1],
                    "versions": pa.array([{"votes": 3}], versions)})  # fmt: skip
    assert append_rows(str(path), row, "txstream-etl:app:streams:1") == 1
    table = DeltaTable(str(path))
    assert table.history(1)[0]["userMetadata"] == "txstream-etl:app:streams:1"
    got = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["etl_batch"])
    assert got == [
        {"query": "streams", "etl_batch": 0, "versions": None},
        {"query": "streams", "etl_batch": 1, "versions": [("votes", 3)]},
    ]


def test_a_merge_that_meets_a_concurrent_compaction_is_merged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`etl maintain` compacts the tables a running ETL writes. A compaction that commits
    between the merge's read of the table and its own commit fails the merge (delta-rs:
    "a concurrent transaction added new data"); the merge is then made again on the new
    version, once, instead of failing the micro-batch and stopping the query."""
    path = tmp_path / "stats"
    for n in range(3):
        row = pa.table({"counter": [f"k{n}"], "value": [n], "etl_batch": [0]}, SCHEMA)
        write_deltalake(str(path), row, mode="append")
    opened: list[int] = []

    def compacted_after_opening(uri: str) -> DeltaTable:
        table = DeltaTable(uri)
        if not opened:  # the first attempt's snapshot goes stale under it
            DeltaTable(uri).optimize.compact()
        opened.append(table.version())
        return table

    monkeypatch.setattr(driver_writes, "DeltaTable", compacted_after_opening)
    mark = "txstream-etl:app:changelog:1"
    version = merge_changes(
        str(path), changes([("k0", 9, False, True), ("k1", None, True, False)], 1),
        ["counter"], False, mark,
    )  # fmt: skip
    assert opened == [2, 3]
    assert state(path) == {"k0": (9, 1), "k2": (2, 0)}
    history = DeltaTable(str(path)).history()
    assert [c["version"] for c in history if c.get("userMetadata") == mark] == [version] == [4]
