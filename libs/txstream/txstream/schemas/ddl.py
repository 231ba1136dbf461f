"""Avro schemas as SQL column lists (Spark's DDL), for a warehouse that knows an app only by
its declarations: one column per field, nullable unions as their type, records as STRUCTs."""

from __future__ import annotations

from typing import Any

PRIMITIVES = {
    "boolean": "BOOLEAN",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "bytes": "BINARY",
    "string": "STRING",
}
LOGICAL = {
    "timestamp-millis": "TIMESTAMP",
    "timestamp-micros": "TIMESTAMP",
    "date": "DATE",
    "uuid": "STRING",
}


# The warehouse's own bookkeeping columns (the ETL job's facts and mirrors carry them beside
# the data): a field of the same name is loaded under another (`rename`).
RESERVED = frozenset({
    "batch_id", "seq", "source_partition", "source_offset", "committed_at", "committed_date",
    "etl_batch", "is_current",
})  # fmt: skip


class UnmappableSchema(ValueError):
    """A field whose Avro type has no column type (a union of several non-null types)."""


def columns(schema: Any) -> list[tuple[str, str]]:
    """(name, SQL type) of each field of a parsed record schema, in order."""
    named = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise UnmappableSchema(f"{schema!r} is not a record schema")
    return [(f["name"], _type(f["type"], named, f["name"])) for f in schema["fields"]]


def column_list(cols: list[tuple[str, str]]) -> str:
    return ", ".join(f"{quoted(name)} {sql}" for name, sql in cols)


def quoted(name: str) -> str:
    return name if name.isidentifier() else "`" + name.replace("`", "``") + "`"


def _type(t: Any, named: dict[str, Any], where: str) -> str:
    if isinstance(t, str):
        if t in PRIMITIVES:
            return PRIMITIVES[t]
        if t in named:
            return _type(named[t], named, where)
        raise UnmappableSchema(f"field {where!r}: unknown type {t!r}")
    if isinstance(t, list):
        rest = [b for b in t if b != "null"]
        if len(rest) != 1:
            raise UnmappableSchema(f"field {where!r}: a union of {rest} has no one column type")
        return _type(rest[0], named, where)
    kind = t.get("type")
    if t.get("logicalType") in LOGICAL:
        return LOGICAL[t["logicalType"]]
    if t.get("logicalType") == "decimal":
        return f"DECIMAL({t['precision']}, {t.get('scale', 0)})"
    if kind == "record":
        fields = ", ".join(
            f"{quoted(f['name'])}: {_type(f['type'], named, where + '.' + f['name'])}"
            for f in t["fields"]
        )
        return f"STRUCT<{fields}>"
    if kind == "array":
        return f"ARRAY<{_type(t['items'], named, where)}>"
    if kind == "map":
        return f"MAP<STRING, {_type(t['values'], named, where)}>"
    if kind == "enum":
        return "STRING"
    if kind == "fixed":
        return "BINARY"
    return _type(kind, named, where)
