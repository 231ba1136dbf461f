"""The schema directory registry: cross-file references, lookups and the errors for bad files."""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path
from typing import Any

import avro.schema
import pytest
from fastavro import schemaless_reader, schemaless_writer

from txstream.config import project_root
from txstream.schemas import (
    ENVELOPE,
    SchemaError,
    SchemaFileError,
    SchemaRegistry,
    UnknownSchemaError,
    load_avsc,
    to_avsc,
)

KIND = {"type": "enum", "name": "Kind", "namespace": "shop", "symbols": ["SMS", "WEB"]}
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "Kind"},
        {"name": "previous_kind", "type": ["null", "shop.Kind"], "default": None},
        {
            "name": "where",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [{"name": "city", "type": "string"}],
            },
        },
    ],
}
UNRELATED = {"type": "fixed", "name": "Hash", "namespace": "other", "size": 4}


def write(dir_: Path, name: str, schema: Any) -> Path:
    path = dir_ / name
    path.write_text(schema if isinstance(schema, str) else json.dumps(schema))
    return path


def round_trip(schema: Any, record: Any) -> Any:
    buf = BytesIO()
    schemaless_writer(buf, schema, record)
    buf.seek(0)
    return schemaless_reader(buf, schema, None)


def test_references_resolve_across_files_whatever_their_order_and_names(tmp_path: Path) -> None:
    # "a_order" sorts before "z_kind", so the first pass cannot parse the order yet.
    write(tmp_path, "a_order.avsc", ORDER)
    (tmp_path / "nested").mkdir()
    write(tmp_path / "nested", "z_kind.avsc", KIND)
    registry = SchemaRegistry(tmp_path)

    assert [n for n in registry.names() if not n.startswith("txstream.")] == [
        "shop.Kind",
        "shop.Order",
        "shop.Place",
    ]
    assert registry.origin("shop.Kind") == tmp_path / "nested" / "z_kind.avsc"
    record = {"id": 7, "kind": "WEB", "previous_kind": "SMS", "where": {"city": "Boston"}}
    assert round_trip(registry.get("shop.Order"), record) == record


def test_nested_named_types_can_be_fetched_by_name(tmp_path: Path) -> None:
    write(tmp_path, "kind.avsc", KIND)
    write(tmp_path, "order.avsc", ORDER)
    place = SchemaRegistry(tmp_path).get("shop.Place")
    assert round_trip(place, {"city": "Lyon"}) == {"city": "Lyon"}


def test_a_schema_carries_only_the_named_types_it_uses(tmp_path: Path) -> None:
    write(tmp_path, "kind.avsc", KIND)
    write(tmp_path, "order.avsc", ORDER)
    write(tmp_path, "hash.avsc", UNRELATED)
    order = SchemaRegistry(tmp_path).get("shop.Order")
    assert isinstance(order, dict)
    assert set(order["__named_schemas"]) == {"shop.Order", "shop.Kind", "shop.Place"}


def test_malformed_json_names_the_file_and_position(tmp_path: Path) -> None:
    write(tmp_path, "kind.avsc", KIND)
    write(tmp_path, "broken.avsc", '{"type": "record",\n "name": }')
    with pytest.raises(SchemaFileError, match=r"broken\.avsc: invalid JSON at line 2") as info:
        SchemaRegistry(tmp_path)
    assert info.value.path == tmp_path / "broken.avsc"


def test_an_invalid_schema_names_the_file(tmp_path: Path) -> None:
    write(tmp_path, "bad.avsc", {"type": "record", "name": "R", "fields": [{"name": "x"}]})
    with pytest.raises(SchemaFileError, match=r"bad\.avsc: invalid Avro schema: .*'x'"):
        SchemaRegistry(tmp_path)


def test_an_undefined_reference_names_the_file_and_the_type(tmp_path: Path) -> None:
    write(tmp_path, "order.avsc", ORDER)
    with pytest.raises(SchemaFileError, match=r"order\.avsc: unknown type 'shop\.Kind'"):
        SchemaRegistry(tmp_path)


def test_a_type_defined_in_two_files_names_both(tmp_path: Path) -> None:
    write(tmp_path, "a.avsc", KIND)
    write(tmp_path, "b.avsc", KIND)
    with pytest.raises(SchemaFileError, match=r"b\.avsc: redefines shop\.Kind.*a\.avsc"):
        SchemaRegistry(tmp_path)


def test_an_unknown_name_is_named_with_close_matches(tmp_path: Path) -> None:
    write(tmp_path, "kind.avsc", KIND)
    registry = SchemaRegistry(tmp_path)
    with pytest.raises(UnknownSchemaError, match=r"'shop\.Knd'.*did you mean shop\.Kind"):
        registry.get("shop.Knd")


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="nowhere"):
        SchemaRegistry(tmp_path / "nowhere")


def test_the_project_schemas_load_and_include_the_envelope() -> None:
    registry = SchemaRegistry(project_root() / "schemas")
    assert ENVELOPE in registry.names()


def test_load_avsc_resolves_against_a_registry_and_prefers_its_own_definitions(
    tmp_path: Path,
) -> None:
    write(tmp_path, "kind.avsc", KIND)
    write(tmp_path, "order.avsc", ORDER)
    older = {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "kind", "type": "shop.Kind"},
        ],
    }
    outside = write(tmp_path.parent, f"{tmp_path.name}-older.avsc", older)
    parsed = load_avsc(outside, SchemaRegistry(tmp_path))
    assert round_trip(parsed, {"id": 1, "kind": "SMS"}) == {"id": 1, "kind": "SMS"}
    with pytest.raises(SchemaFileError, match=r"unknown type 'shop\.Kind'"):
        load_avsc(outside)


def test_to_avsc_is_self_contained_for_apache_avro(tmp_path: Path) -> None:
    write(tmp_path, "kind.avsc", KIND)
    write(tmp_path, "order.avsc", ORDER)
    standalone = to_avsc(SchemaRegistry(tmp_path).get("shop.Order"))
    text = json.dumps(standalone)
    assert "__" not in text
    # Kind is used twice: defined at its first use, referenced by name at the second.
    assert standalone["fields"][1]["type"]["symbols"] == ["SMS", "WEB"]
    assert standalone["fields"][2]["type"] == ["null", "shop.Kind"]
    parsed = avro.schema.parse(text)
    assert isinstance(parsed, avro.schema.RecordSchema)
    assert [f.name for f in parsed.fields] == ["id", "kind", "previous_kind", "where"]


def test_an_apps_own_directory_also_has_txstreams_record_types(tmp_path: Path) -> None:
    """An app's schema directory holds only its schemas; the engine's own (envelopes,
    aborts, commit notices) come with txstream, unless the directory redefines one."""
    write(tmp_path, "order.avsc", KIND)
    registry = SchemaRegistry(tmp_path)
    assert registry.get("shop.Kind")
    assert registry.origin("txstream.AbortRecord").name == "AbortRecord.avsc"
    assert registry.get("txstream.CommitNotice")
    (tmp_path / "txstream").mkdir()
    mine = {"type": "record", "name": "AbortRecord", "namespace": "txstream", "fields": []}
    (tmp_path / "txstream" / "AbortRecord.avsc").write_text(json.dumps(mine))
    assert SchemaRegistry(tmp_path).origin("txstream.AbortRecord").parent == tmp_path / "txstream"
