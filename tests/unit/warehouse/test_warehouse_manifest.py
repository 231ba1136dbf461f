"""`txstream describe --format warehouse`: every app's warehouse file, from its declarations
alone, is one the ETL job loads; its columns follow the Avro schemas and declared keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from txstream import App
from txstream.cli.main import app as cli
from txstream.model.errors import DataflowError
from txstream.schemas.ddl import RESERVED, UnmappableSchema, column_list, columns
from txstream_etl.config import WarehouseConfigError, load_config
from txstream_etl.tables import FACT_META, MIRROR_META

APPS = [
    "leaderboard.dataflow:from_params",
    "bank.dataflow:from_params",
    "bank.stream_transfers:from_params",
    "bank.nested_transfers:from_params",
    "chain.dataflow:from_params",
    "orders.dataflow:from_params",
    "orders.sales:from_params",
    "ycsb.dataflow:from_params",
]


def manifest(spec: str, tmp_path: Path) -> Path:
    result = CliRunner().invoke(cli, ["describe", "--app", spec, "--format", "warehouse"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "warehouse.toml"
    path.write_text(result.output)
    return path


@pytest.mark.parametrize("spec", APPS)
def test_every_app_gets_a_warehouse_file_the_etl_loads(spec: str, tmp_path: Path) -> None:
    config = load_config(manifest(spec, tmp_path))
    assert config.facts or config.mirrors
    assert all(f.rule == "any" for f in config.facts)


def test_columns_follow_the_schemas_and_the_declared_keys(tmp_path: Path) -> None:
    config = load_config(manifest("orders.sales:from_params", tmp_path))
    facts = {f.table.name: f for f in config.facts}
    assert facts["item_totals"].table.columns == (
        "tuple_seq BIGINT, item BIGINT, orders BIGINT, units BIGINT"
    )
    assert facts["item_totals"].rename == (("seq", "tuple_seq"),)  # `seq` is the ETL's own
    mirrors = {m.table.name: m.table for m in config.mirrors}
    assert mirrors["placed"].key == ("customer", "order_id")
    assert mirrors["placed"].columns == "customer BIGINT, order_id BIGINT, row_seq BIGINT"
    assert mirrors["item_sales"].columns == "item BIGINT, orders BIGINT, units BIGINT"
    chain = load_config(manifest("chain.dataflow:from_params", tmp_path))
    (totals,) = chain.mirrors
    assert totals.table.key == ("key",)  # undeclared: one text column
    assert totals.table.columns.startswith("key STRING, ")


def test_avro_types_map_to_columns() -> None:
    schema = {
        "type": "record",
        "name": "t.R",
        "fields": [
            {"name": "n", "type": ["null", "long"]},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "m", "type": {"type": "map", "values": "double"}},
            {"name": "in", "type": {"type": "record", "name": "t.In",
                                    "fields": [{"name": "x", "type": "int"}]}},
            {"name": "e", "type": {"type": "enum", "name": "t.E", "symbols": ["A"]}},
            {"name": "odd-name", "type": "boolean"},
        ],
    }  # fmt: skip
    assert column_list(columns(schema)) == (
        "n BIGINT, at TIMESTAMP, tags ARRAY<STRING>, m MAP<STRING, DOUBLE>, "
        "in STRUCT<x: INT>, e STRING, `odd-name` BOOLEAN"
    )
    bad = {"type": "record", "name": "t.B", "fields": [{"name": "u", "type": ["int", "string"]}]}
    with pytest.raises(UnmappableSchema, match="field 'u': a union of"):
        columns(bad)


def test_a_key_part_must_be_a_key_type() -> None:
    with pytest.raises(DataflowError, match="table 't': key part 'k' is a 'double'"):
        App("x").table("t", schema="bank.Account", key={"k": "double"})


def test_the_reserved_names_are_the_etl_jobs_own_columns() -> None:
    own = {c.split()[0] for c in f"{FACT_META}, {MIRROR_META}".split(", ")} | {"is_current"}
    assert own == RESERVED


def test_a_spanning_stream_is_a_broadcast_fact_loaded_once(tmp_path: Path) -> None:
    """Every engine reads each transfers batch, so each is on every partition: the fact
    takes one copy; the outcomes, which one engine writes, are a fact like any other."""
    config = load_config(manifest("bank.stream_transfers:from_params", tmp_path))
    facts = {f.stream: f for f in config.facts}
    assert facts["transfers"].broadcast and not facts["transfer_outcomes"].broadcast
    bad = tmp_path / "bad.toml"
    bad.write_text(manifest("bank.stream_transfers:from_params", tmp_path).read_text()
                   .replace("broadcast = true", 'broadcast = "yes"'))  # fmt: skip
    with pytest.raises(WarehouseConfigError, match=r"fact \d \(transfers\): broadcast must be"):
        load_config(bad)
