"""The warehouse file: the Leaderboard's agrees with its declarations; bad files name the fault."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from leaderboard import WAREHOUSE_CONFIG
from leaderboard.dataflow import Params, build_app
from leaderboard.results import result_document
from txstream_etl.config import WarehouseConfigError, load_config, tables
from txstream_etl.tables import FactTable, MirrorTable
from txstream_etl.warehouse import SnapshotError, Warehouse


def test_the_leaderboard_warehouse_agrees_with_its_declarations() -> None:
    config = load_config(WAREHOUSE_CONFIG)
    decl = build_app(Params()).decl
    assert config.facts and config.mirrors
    for fact in config.facts:
        assert decl.streams[fact.stream].schema == fact.schema
    for mirror in config.mirrors:
        assert decl.tables[mirror.engine_table].schema == mirror.schema
    assert config.snapshot is not None
    # The snapshot document has exactly the keys of the workload's result document.
    assert {v.name for v in config.snapshot.values} == set(result_document({}))
    kinds = {t.name: type(t) for t in tables(config)}
    assert kinds["votes"] is FactTable and kinds["contestants"] is MirrorTable
    assert [a.table.name for a in config.aggregates] == ["daily_votes"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "warehouse.toml"
    path.write_text(text)
    return path


FACT = """
[[fact]]
table = "votes"
stream = "accepted_votes"
schema = "leaderboard.AcceptedVote"
columns = "vote_id BIGINT"
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[fact]]\ntable = 'votes'\n", "fact 0 (votes) needs 'columns'"),
        (FACT.replace('"votes"', "1"), "table must be a str"),
        (FACT + 'rule = "nope"\n', "unknown rule 'nope'"),
        (FACT + FACT, "tables named twice: ['votes']"),
        ("[[mirror]]\ntable='t'\ncolumns='a INT'\nschema='s'\nkey=[]\n", "key must name"),
        ("[snapshot]\ntable='s'\n[[snapshot.value]]\nname='x'\nshape='cube'\nsql='SELECT 1'\n",
         "shape must be one of"),
        ("[snapshot]\ntable='s'\nshow=['y']\n[[snapshot.value]]\nname='x'\nshape='scalar'\n"
         "sql='SELECT 1'\n", "shows unknown values"),
        ("[tables]\n", "unknown sections ['tables']"),
        ("fact = [", "is not TOML"),
    ],
)  # fmt: skip
def test_a_bad_warehouse_file_is_refused_naming_the_fault(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(WarehouseConfigError) as e:
        load_config(path)
    assert message in str(e.value) and str(path) in str(e.value)


def test_a_missing_warehouse_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(WarehouseConfigError, match=r"nothing\.toml"):
        load_config(tmp_path / "nothing.toml")


I64, TEXT = pa.int64(), pa.string()
STATS = pa.table(
    {
        "counter": ["accepted", "rejected"],
        "detail": pa.array([None, "over_vote_limit"], TEXT),
        "value": pa.array([72, 3], I64),
    }
)


def snapshot_of(root: Path, stats: pa.Table) -> dict[str, object]:
    """The snapshot document the Leaderboard's warehouse takes of these mirrors (no others)."""
    mirrors = {
        "contestants": pa.table({
            "contestant_number": pa.array([1, 2, 3, 4, 5], I64),
            "contestant_name": pa.array(["a", "b", "c", "d", "e"], TEXT),
            "num_votes": pa.array([10, 30, 20, 5, 7], I64),
            "is_current": [True, True, True, False, True],
        }),
        "removals": pa.table({"seq": pa.array([1], I64), "contestant_number": pa.array([4], I64),
                              "num_votes": pa.array([5], I64), "at_accepted": pa.array([60], I64)}),
        "stats": stats,
        "trending": pa.table({"contestant_number": pa.array([1, 4, 5], I64),
                              "value": pa.array([4, 9, 2], I64)}),
    }  # fmt: skip
    for name, rows in mirrors.items():
        write_deltalake(str(root / name), rows)
    config = load_config(WAREHOUSE_CONFIG)
    assert config.snapshot is not None
    warehouse = Warehouse("lb", str(root), "schemas", config, raw_topic=None)
    return warehouse.snapshot_document(config.snapshot)


def test_the_snapshot_is_computed_from_the_mirrors_by_delta_rs(tmp_path: Path) -> None:
    """The Leaderboard's snapshot SQL runs on delta-rs over the mirrors as they stand. Without a
    raw topic the raw table is never created, and the snapshot must not read it (it did, and
    `make demo`'s ETL failed with PATH_NOT_FOUND on ingested_votes): it is absent here."""
    doc = snapshot_of(tmp_path / "lb", STATS)
    assert json.loads(json.dumps(doc)) == {
        "accepted": 72,
        "rejected": {"duplicate_vote_id": 0, "invalid_contestant": 0, "over_vote_limit": 3},
        "contestants": [{"contestant_number": n, "num_votes": v}
                        for n, v in [(1, 10), (2, 30), (3, 20), (5, 7)]],
        "removed": [{"contestant_number": 4, "num_votes": 5, "at_accepted": 60}],
        "top3": [[2, 30], [3, 20], [1, 10]],
        "bottom3": [[5, 7], [1, 10], [3, 20]],
        "trending3": [[1, 4], [5, 2]],
    }  # fmt: skip


def test_a_snapshot_value_that_fails_is_named(tmp_path: Path) -> None:
    """A `stats` table without its `detail` column: the value `accepted` cannot run."""
    with pytest.raises(SnapshotError, match="'accepted' failed"):
        snapshot_of(tmp_path / "lb", STATS.drop_columns(["detail"]))
