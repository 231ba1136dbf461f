"""Avro writers made once per record schema, for records of scalars.

fastavro's writer finds each value's type in the schema again on every call: ~8 µs for a
Leaderboard batch of one tuple and ~3 µs for an empty one, the largest single cost of a batch
after the procedures, and ~3 µs for each changelog row (docs/performance-history.md,
2026-11-28). Most tuples and rows hold only scalars and nullable scalars, so their writer
is a list of field functions worked out once from the schema, about twice as fast.

A writer takes only the exact Python type its Avro type is written from (an `int` for a long,
a `str` for a string, ...) and raises otherwise. The caller then writes the record with
fastavro instead, so every record the writers do not take gets fastavro's bytes, or its error,
as before; tests check that both write the same bytes.

`record_fields` also takes enums, arrays and nested records, nullable or not: the shapes of
the OLTP wire messages (`oltp.messages`), which the coordinator and every participant encode
several times per 2PC transfer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Write = Callable[[bytearray, Any], None]
# (name, the schema's default, the writer) for each field of a record, in schema order
Fields = tuple[tuple[str, Any, Write], ...]
Named = Mapping[str, Any]

_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack


def write_long(out: bytearray, n: Any) -> None:
    """Avro's int and long: zigzag, then 7 bits a byte, low bits first. fastavro writes an
    int as a long, and refuses what a signed 64-bit integer cannot hold."""
    if type(n) is not int or not _LONG_MIN <= n <= _LONG_MAX:
        raise TypeError(f"not a long: {n!r}")
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _write_int(out: bytearray, n: Any) -> None:
    """An int in a union (`_IN_UNION`)."""
    if type(n) is not int or not _INT_MIN <= n <= _INT_MAX:
        raise TypeError(f"not an int: {n!r}")
    write_long(out, n)


def long_bytes(n: int) -> bytes:
    out = bytearray()
    write_long(out, n)
    return bytes(out)


def write_string(out: bytearray, s: Any) -> None:
    if type(s) is not str:
        raise TypeError(f"not a string: {s!r}")
    data = s.encode()
    write_long(out, len(data))
    out += data


def _write_bytes(out: bytearray, b: Any) -> None:
    if type(b) is not bytes:
        raise TypeError(f"not bytes: {b!r}")
    write_long(out, len(b))
    out += b


def _write_boolean(out: bytearray, b: Any) -> None:
    if type(b) is not bool:
        raise TypeError(f"not a boolean: {b!r}")
    out.append(1 if b else 0)


def _write_null(out: bytearray, v: Any) -> None:
    if v is not None:
        raise TypeError(f"not null: {v!r}")


def _write_double(out: bytearray, x: Any) -> None:
    if type(x) is not float:
        raise TypeError(f"not a double: {x!r}")
    out += _DOUBLE(x)


def _write_float(out: bytearray, x: Any) -> None:
    if type(x) is not float:
        raise TypeError(f"not a float: {x!r}")
    out += _FLOAT(x)


_SCALARS: dict[str, Write] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": write_long,
    "long": write_long,
    "float": _write_float,
    "double": _write_double,
    "string": write_string,
    "bytes": _write_bytes,
}

# A union's branch writers: fastavro picks an int branch only for a signed 32-bit value.
_IN_UNION: dict[str, Write] = {**_SCALARS, "int": _write_int}


def _nullable(index: int, write: Write) -> Write:
    """A union of null and one other type, whose value branch is at `index`: the branch's
    index, then the value. What the branch's writer takes, fastavro's union also writes
    with that branch."""
    null, value = (b"\x02", b"\x00") if index == 0 else (b"\x00", b"\x02")

    def write_nullable(out: bytearray, v: Any) -> None:
        if v is None:
            out += null
        else:
            out += value
            write(out, v)

    return write_nullable


def _writer(avro_type: object) -> Write | None:
    if isinstance(avro_type, str):
        return _SCALARS.get(avro_type)
    if isinstance(avro_type, list) and len(avro_type) == 2 and "null" in avro_type:
        index = avro_type.index("null")
        other = avro_type[1 - index]
        if isinstance(other, str) and other != "null" and other in _IN_UNION:
            return _nullable(1 - index, _IN_UNION[other])
    return None


def _enum(symbols: Sequence[str]) -> Write:
    index = {s: i for i, s in enumerate(symbols)}

    def write_enum(out: bytearray, v: Any) -> None:
        if type(v) is not str or v not in index:
            raise ValueError(f"not a symbol of {list(symbols)}: {v!r}")
        write_long(out, index[v])

    return write_enum


def _array(write_item: Write) -> Write:
    def write_array(out: bytearray, v: Any) -> None:
        if type(v) is not list:
            raise TypeError(f"not a list: {v!r}")
        if v:
            write_long(out, len(v))
            for item in v:
                write_item(out, item)
        out.append(0)

    return write_array


def _record(fields: Fields) -> Write:
    def write_nested(out: bytearray, v: Any) -> None:
        if type(v) is not dict:
            raise TypeError(f"not a dict: {v!r}")
        write_record(out, fields, v)

    return write_nested


def _any_writer(
    avro_type: object, named: Named, seen: frozenset[str] = frozenset()
) -> Write | None:
    """A writer for a scalar, enum, array or record, or a union of null and one of them.
    `named`: the parsed schema's named types, for a field that names one (a recursive type
    is left to fastavro)."""
    scalar = _writer(avro_type)
    if scalar is not None:
        return scalar
    if isinstance(avro_type, str):  # a named type; a record adds its name to `seen`
        if avro_type in seen or avro_type not in named:
            return None
        return _any_writer(named[avro_type], named, seen)
    if isinstance(avro_type, list):
        if len(avro_type) != 2 or "null" not in avro_type:
            return None
        index = avro_type.index("null")
        inner = _any_writer(avro_type[1 - index], named, seen)
        return None if inner is None else _nullable(1 - index, inner)
    if not isinstance(avro_type, dict) or "logicalType" in avro_type:
        return None
    kind = avro_type.get("type")
    if kind == "enum":
        return _enum(avro_type["symbols"])
    if kind == "array":
        item = _any_writer(avro_type["items"], named, seen)
        return None if item is None else _array(item)
    if kind == "record":
        fields = _nested_fields(avro_type, named, seen | {avro_type["name"]})
        return None if fields is None else _record(fields)
    return None


def _nested_fields(schema: Mapping[str, Any], named: Named, seen: frozenset[str]) -> Fields | None:
    fields = []
    for f in schema.get("fields", ()):
        write = _any_writer(f["type"], named, seen)
        if write is None:
            return None
        fields.append((f["name"], f.get("default"), write))
    return tuple(fields)


def record_fields(schema: object) -> Fields | None:
    """Like `flat_fields`, with enums, arrays and records among the fields' types too."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    return _nested_fields(schema, schema.get("__named_schemas", {}), frozenset({schema["name"]}))


def flat_fields(schema: object) -> Fields | None:
    """The field writers of a parsed record schema, or None if any field is not a scalar or
    a union of null and a scalar (logical types, enums, collections, records: fastavro)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    fields = []
    for f in schema.get("fields", ()):
        write = _writer(f["type"])
        if write is None:
            return None
        fields.append((f["name"], f.get("default"), write))
    return tuple(fields)


def write_record(out: bytearray, fields: Fields, record: Mapping[str, Any]) -> None:
    for name, default, write in fields:
        write(out, record.get(name, default))


def write_records(out: bytearray, fields: Fields, records: Sequence[Mapping[str, Any]]) -> None:
    """An Avro array of records: one block of them, then the empty block that ends it."""
    if records:
        write_long(out, len(records))
        for record in records:
            write_record(out, fields, record)
    out.append(0)
