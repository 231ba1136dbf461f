"""Avro readers made once per record schema: the reading side of `schemas.writers`.

fastavro's reader walks the schema again for every record: 8-14 µs for an OLTP message of a
2PC transfer (a request, a vote, an ack), and the coordinator decodes five of them per
transfer (docs/performance-history.md, 2026-11-28). A record of scalars, enums, arrays and nested
records, nullable or not, is read here by functions worked out once from its schema.

A reader is strict where Avro allows only one reading: a boolean is the byte 0 or 1, an int
fits 32 bits and a long 64, an enum or union index names a branch, a string is UTF-8, and a
length never runs past the bytes. It raises otherwise (`ValueError`, or `IndexError` and
`struct.error` for bytes that end too soon). Whatever a reader returns,
fastavro returns too from the same bytes (tests check it on random bytes), so a record that
decodes here decodes as it always did.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# (the bytes, where the value starts) -> (the value, where the next one starts)
Read = Callable[[bytes, int], tuple[Any, int]]
Named = Mapping[str, Any]

_DOUBLE = struct.Struct("<d").unpack_from
_FLOAT = struct.Struct("<f").unpack_from
_LONG_MAX_VARINT = 10  # bytes: 64 bits, 7 a byte


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of at most 64 bits."""
    b = data[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift >= 7 * _LONG_MAX_VARINT:
            raise ValueError(f"a long of more than {_LONG_MAX_VARINT} bytes at {pos}")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if n >> 64:
        raise ValueError(f"a long beyond 64 bits before {pos}")
    return (n >> 1) ^ -(n & 1), pos


def _read_int(data: bytes, pos: int) -> tuple[int, int]:
    n, pos = read_long(data, pos)
    if not -(1 << 31) <= n < 1 << 31:
        raise ValueError(f"an int beyond 32 bits before {pos}")
    return n, pos


def _span(data: bytes, pos: int) -> tuple[int, int]:
    """Where the bytes of a string or bytes value start and end, after its length."""
    n, start = read_long(data, pos)
    if n < 0 or start + n > len(data):
        raise ValueError(f"a length of {n} at {start} runs past the {len(data)} bytes")
    return start, start + n


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    start, end = _span(data, pos)
    return data[start:end].decode(), end


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    start, end = _span(data, pos)
    return data[start:end], end


def _read_boolean(data: bytes, pos: int) -> tuple[bool, int]:
    b = data[pos]
    if b > 1:
        raise ValueError(f"a boolean byte of {b} at {pos}")
    return b == 1, pos + 1


def _read_null(data: bytes, pos: int) -> tuple[None, int]:
    return None, pos


def _read_double(data: bytes, pos: int) -> tuple[float, int]:
    return _DOUBLE(data, pos)[0], pos + 8


def _read_float(data: bytes, pos: int) -> tuple[float, int]:
    return _FLOAT(data, pos)[0], pos + 4


_SCALARS: dict[str, Read] = {
    "null": _read_null,
    "boolean": _read_boolean,
    "int": _read_int,
    "long": read_long,
    "float": _read_float,
    "double": _read_double,
    "string": _read_string,
    "bytes": _read_bytes,
}


def _nullable(index: int, read: Read) -> Read:
    """A union of null and one other type, whose branch is at `index`."""

    def read_nullable(data: bytes, pos: int) -> tuple[Any, int]:
        branch = data[pos]
        if branch == 2 * index:  # the zigzag varint of a small index is one byte
            return read(data, pos + 1)
        if branch == 2 * (1 - index):
            return None, pos + 1
        raise ValueError(f"no union branch {branch} at {pos}")

    return read_nullable


def _enum(symbols: Sequence[str]) -> Read:
    names = list(symbols)

    def read_enum(data: bytes, pos: int) -> tuple[str, int]:
        i, end = read_long(data, pos)
        if not 0 <= i < len(names):
            raise ValueError(f"no enum symbol {i} at {pos}")
        return names[i], end

    return read_enum


def _array(read_item: Read) -> Read:
    def read_array(data: bytes, pos: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        while True:
            count, pos = read_long(data, pos)
            if count == 0:
                return items, pos
            if count < 0:  # a block that gives its size in bytes too
                count = -count
                _, pos = read_long(data, pos)
            if count > len(data) - pos:  # each item takes a byte at least
                raise ValueError(f"a block of {count} items at {pos} runs past the bytes")
            for _ in range(count):
                item, pos = read_item(data, pos)
                items.append(item)

    return read_array


def _record(fields: tuple[tuple[str, Read], ...]) -> Read:
    def read_record(data: bytes, pos: int) -> tuple[dict[str, Any], int]:
        out = {}
        for name, read in fields:
            out[name], pos = read(data, pos)
        return out, pos

    return read_record


def _reader(avro_type: object, named: Named, seen: frozenset[str] = frozenset()) -> Read | None:
    """`named`: the parsed schema's named types, for a field that names one (a recursive
    type is left to fastavro)."""
    if isinstance(avro_type, str):
        if avro_type in _SCALARS:
            return _SCALARS[avro_type]
        if avro_type in seen or avro_type not in named:  # a record adds its name to `seen`
            return None
        return _reader(named[avro_type], named, seen)
    if isinstance(avro_type, list):
        if len(avro_type) != 2 or "null" not in avro_type:
            return None
        index = 1 - avro_type.index("null")
        inner = _reader(avro_type[index], named, seen)
        return None if inner is None or avro_type[index] == "null" else _nullable(index, inner)
    if not isinstance(avro_type, dict) or "logicalType" in avro_type:
        return None
    kind = avro_type.get("type")
    if kind == "enum":
        return _enum(avro_type["symbols"])
    if kind == "array":
        items = avro_type["items"]
        item = _reader(items, named, seen)
        return None if item is None or _no_bytes(items, named) else _array(item)
    if kind == "record":
        seen = seen | {avro_type["name"]}
        fields = []
        for f in avro_type.get("fields", ()):
            read = _reader(f["type"], named, seen)
            if read is None:
                return None
            fields.append((f["name"], read))
        return _record(tuple(fields))
    return None


def _no_bytes(avro_type: object, named: Named) -> bool:
    """Whether a value of the type is written as no bytes at all (null, a record of such):
    an array of them is left to fastavro, since its length cannot be checked against the
    bytes left."""
    if isinstance(avro_type, str):
        return avro_type == "null" or (avro_type in named and _no_bytes(named[avro_type], named))
    return (
        isinstance(avro_type, dict)
        and avro_type.get("type") == "record"
        and all(_no_bytes(f["type"], named) for f in avro_type.get("fields", ()))
    )


def record_reader(schema: object) -> Callable[[bytes, int], tuple[dict[str, Any], int]] | None:
    """The reader of a parsed record schema, or None if it holds a type not read here (a
    map, a fixed, a logical type, a wider union: fastavro reads those)."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    return _reader(schema, schema.get("__named_schemas", {}))
