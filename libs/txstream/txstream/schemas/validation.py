"""Where a datum departs from its schema, as a field path a person can act on.

fastavro decides whether a leaf value fits its type, but reports a failing field by its
record's type name, without the path or the array index; input tools need both
(`tuples[2].phone`). Records are checked strictly: a key the schema lacks is an error, since a
misspelt optional field would otherwise vanish silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastavro.types import NamedSchemas, Schema
from fastavro.validation import validate

_MAX_SHOWN = 60


@dataclass(frozen=True)
class DatumError:
    """The first mismatch found: `path` is empty when the datum itself has the wrong shape."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"field '{self.path}': {self.message}" if self.path else self.message


def find_error(datum: Any, schema: Schema) -> DatumError | None:
    """The first place where `datum` does not fit the parsed `schema`, or None if it fits."""
    named: NamedSchemas = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    return _check(datum, schema, named, "")


def describe(schema: Schema, named: NamedSchemas) -> str:
    """A short type name for messages: `int`, `long (timestamp-millis)`, `null or string`."""
    s = _resolve(schema, named)
    if isinstance(s, list):
        return " or ".join(describe(branch, named) for branch in s)
    if isinstance(s, str):
        return s
    kind = s["type"]
    if kind in ("record", "error"):
        return f"record {s['name']} (a JSON object)"
    if kind == "enum":
        return f"enum {s['name']} (one of {', '.join(s['symbols'])})"
    if kind == "fixed":
        return f"fixed {s['name']} ({s['size']} bytes)"
    if kind == "array":
        return f"array of {describe(s['items'], named)}"
    if kind == "map":
        return f"map of {describe(s['values'], named)}"
    logical = s.get("logicalType")
    return f"{kind} ({logical})" if logical else str(kind)


def shown(datum: Any) -> str:
    """The datum as JSON, cut short so one bad value cannot flood a message."""
    text = json.dumps(datum, default=repr, ensure_ascii=False)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _resolve(schema: Schema, named: NamedSchemas) -> Schema:
    return named[schema] if isinstance(schema, str) and schema in named else schema


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _mismatch(datum: Any, schema: Schema, named: NamedSchemas, path: str) -> DatumError:
    return DatumError(path, f"expected {describe(schema, named)}, got {shown(datum)}")


def _check(datum: Any, schema: Schema, named: NamedSchemas, path: str) -> DatumError | None:
    s = _resolve(schema, named)
    if isinstance(s, list):
        return _check_union(datum, s, named, path)
    kind = s if isinstance(s, str) else s["type"]
    if isinstance(s, dict) and kind in ("record", "error"):
        return _check_record(datum, s, named, path)
    if isinstance(s, dict) and kind == "array":
        if not isinstance(datum, Sequence) or isinstance(datum, str | bytes):
            return _mismatch(datum, s, named, path)
        for i, item in enumerate(datum):
            error = _check(item, s["items"], named, f"{path}[{i}]")
            if error:
                return error
        return None
    if isinstance(s, dict) and kind == "map":
        if not isinstance(datum, Mapping) or not all(isinstance(k, str) for k in datum):
            return _mismatch(datum, s, named, path)
        for key, value in datum.items():
            error = _check(value, s["values"], named, f"{path}[{json.dumps(key)}]")
            if error:
                return error
        return None
    # JSON true/false are Python ints; only a boolean field should take them.
    if isinstance(datum, bool) and kind != "boolean":
        return _mismatch(datum, s, named, path)
    return None if validate(datum, s, raise_errors=False) else _mismatch(datum, s, named, path)


def _check_record(
    datum: Any, schema: dict[str, Any], named: NamedSchemas, path: str
) -> DatumError | None:
    if not isinstance(datum, Mapping):
        return _mismatch(datum, schema, named, path)
    fields = schema["fields"]
    known = {f["name"] for f in fields}
    for key in datum:
        if key not in known:
            return DatumError(_join(path, str(key)), f"not a field of {schema['name']}")
    for field in fields:
        where = _join(path, field["name"])
        if field["name"] not in datum:
            if "default" in field:
                continue
            return DatumError(where, f"missing; expected {describe(field['type'], named)}")
        error = _check(datum[field["name"]], field["type"], named, where)
        if error:
            return error
    return None


def _check_union(
    datum: Any, branches: list[Schema], named: NamedSchemas, path: str
) -> DatumError | None:
    errors = []
    for branch in branches:
        error = _check(datum, branch, named, path)
        if error is None:
            return None
        errors.append((branch, error))
    # A JSON object or array can only be meant for a branch of that shape: report inside it.
    shaped = [e for b, e in errors if _same_shape(datum, _resolve(b, named))]
    if len(shaped) == 1:
        return shaped[0]
    return _mismatch(datum, branches, named, path)


def _same_shape(datum: Any, schema: Schema) -> bool:
    kind = schema["type"] if isinstance(schema, dict) else None
    if isinstance(datum, Mapping):
        return kind in ("record", "error", "map")
    if isinstance(datum, list):
        return kind == "array"
    return False
