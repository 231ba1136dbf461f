"""Reading a query's tables as of one micro-batch, with delta-rs tables written here: no Spark
(the Leaderboard ETL test reads the real ones)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from txstream_etl.epochs import NoSuchEpoch, epoch, sql_at, tables_at

MARKS = pa.schema([("query", pa.string()), ("etl_batch", pa.int64()),
                   ("versions", pa.map_(pa.string(), pa.int64()))])  # fmt: skip


def mark(root: Path, query: str, etl_batch: int, versions: dict[str, int] | None) -> None:
    row = {"query": query, "etl_batch": etl_batch,
           "versions": list(versions.items()) if versions is not None else None}  # fmt: skip
    write_deltalake(str(root / "etl_commits"), pa.Table.from_pylist([row], MARKS), mode="append")


def put(root: Path, table: str, values: list[int]) -> None:
    write_deltalake(str(root / table), pa.table({"v": values}), mode="append")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Two micro-batches of the changelog query over tables a and b, one of streams."""
    put(tmp_path, "a", [1])  # version 0
    put(tmp_path, "b", [10])  # version 0
    mark(tmp_path, "changelog", 0, {"a": 0, "b": 0})
    put(tmp_path, "a", [2])  # version 1
    mark(tmp_path, "streams", 7, {"f": 3})
    put(tmp_path, "b", [20])  # version 1
    mark(tmp_path, "changelog", 1, {"a": 1, "b": 1})
    put(tmp_path, "a", [3])  # version 2: micro-batch 2, not recorded yet (b still to commit)
    mark(tmp_path, "changelog", 2, None)  # written before versions were recorded
    return tmp_path


def values(root: Path, etl_batch: int | None) -> dict[str, list[int]]:
    _, tables = tables_at(root, "changelog", etl_batch)
    return {n: sorted(t.to_pyarrow_table()["v"].to_pylist()) for n, t in tables.items()}


def test_every_table_is_read_as_of_the_same_micro_batch(root: Path) -> None:
    assert values(root, None) == {"a": [1, 2], "b": [10, 20]}  # not a's third row
    assert values(root, 0) == {"a": [1], "b": [10]}
    assert epoch(root, "streams").versions == {"f": 3}


def test_an_unknown_micro_batch_or_query_is_named(root: Path) -> None:
    with pytest.raises(NoSuchEpoch, match="micro-batch 2 of query 'changelog'"):
        epoch(root, "changelog", 2)
    with pytest.raises(NoSuchEpoch, match="any micro-batch of query 'ingest'"):
        epoch(root, "ingest")


def test_spark_sql_views_name_each_version(root: Path) -> None:
    sql = sql_at(root, "changelog", 0).splitlines()
    assert sql == [
        f"CREATE OR REPLACE TEMPORARY VIEW {t} AS SELECT * FROM delta.`{root}/{t}` VERSION AS OF 0;"
        for t in ("a", "b")
    ]
