"""The warehouse file: the Leaderboard's agrees with its declarations; bad files name the fault."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import MagicMock, patch

import pytest
from pyspark.sql.types import StructType

from leaderboard import WAREHOUSE_CONFIG
from leaderboard.dataflow import Params, build_app
from leaderboard.results import result_document
from txstream_etl.config import WarehouseConfigError, load_config, tables
from txstream_etl.tables import FactTable, MirrorTable
from txstream_etl.warehouse import Warehouse


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


def test_a_snapshot_reads_only_the_tables_this_run_writes() -> None:
    """Without a raw topic the raw table is never created; the snapshot must not read it
    (it did, and `make demo`'s ETL failed with PATH_NOT_FOUND on ingested_votes)."""
    config = load_config(WAREHOUSE_CONFIG)
    warehouse = Warehouse("lb", "/warehouse/lb", "schemas", config, raw_topic=None)
    spark = MagicMock()
    spark.sql.return_value.collect.return_value = []
    take = warehouse.after_batch()
    assert take is not None
    with patch.object(StructType, "fromDDL", return_value=StructType([])):  # needs no session
        take.rows(spark, 1)
    loaded = {c.args[0] for c in spark.read.format.return_value.load.call_args_list}
    assert "/warehouse/lb/contestants" in loaded
    assert "/warehouse/lb/ingested_votes" not in loaded
