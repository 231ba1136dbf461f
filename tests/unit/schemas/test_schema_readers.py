"""The readers and writers made per record schema for nested shapes (enums, arrays, records,
nullable or not) agree with fastavro: the same bytes written, the same record read back, and
never a record read from bytes fastavro would not read as that very record."""

from __future__ import annotations

from io import BytesIO
from itertools import count
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from txstream.schemas.readers import record_reader
from txstream.schemas.writers import record_fields, write_record

SCALARS = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]
LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
INTS = st.integers(min_value=-(2**31), max_value=2**31 - 1)
SCALAR_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": INTS,
    "long": LONGS,
    "float": st.floats(width=32, allow_nan=False),
    "double": st.floats(allow_nan=False),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
}
_names = count()


@st.composite
def avro_types(draw: st.DrawFn, depth: int = 0) -> Any:
    """A scalar, enum, array or record type, or a union of null and one of them."""
    kinds = ["scalar", "enum"] + (["array", "record"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "scalar":
        t: Any = draw(st.sampled_from(SCALARS))
    elif kind == "enum":
        symbols = draw(st.lists(st.sampled_from("ABCDE"), min_size=1, max_size=4, unique=True))
        t = {"type": "enum", "name": f"E{next(_names)}", "symbols": symbols}
    elif kind == "array":
        t = {"type": "array", "items": draw(avro_types(depth + 1).filter(lambda i: i != "null"))}
    else:
        t = draw(records(depth + 1))
    if t != "null" and draw(st.booleans()):
        return ["null", t] if draw(st.booleans()) else [t, "null"]
    return t


@st.composite
def records(draw: st.DrawFn, depth: int = 0) -> dict[str, Any]:
    types = draw(st.lists(avro_types(depth), max_size=4))
    fields = [{"name": f"f{i}", "type": t} for i, t in enumerate(types)]
    return {"type": "record", "name": f"R{next(_names)}", "fields": fields}


def value_of(avro_type: Any) -> st.SearchStrategy[Any]:
    if isinstance(avro_type, list):
        return st.one_of(st.none(), value_of(next(t for t in avro_type if t != "null")))
    if isinstance(avro_type, str):
        return SCALAR_VALUES[avro_type]
    if avro_type["type"] == "enum":
        return st.sampled_from(avro_type["symbols"])
    if avro_type["type"] == "array":
        return st.lists(value_of(avro_type["items"]), max_size=3)
    return st.fixed_dictionaries({f["name"]: value_of(f["type"]) for f in avro_type["fields"]})


@st.composite
def schemas_and_values(draw: st.DrawFn) -> tuple[Any, dict[str, Any]]:
    raw = draw(records())
    return parse_schema(raw), draw(value_of(raw))


def fastavro_bytes(schema: Any, record: Any) -> bytes:
    out = BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


def fastavro_read(schema: Any, data: bytes) -> tuple[Any, int]:
    buf = BytesIO(data)
    return schemaless_reader(buf, schema, None), buf.tell()


@settings(max_examples=400, deadline=None)
@given(schemas_and_values())
def test_a_record_is_written_and_read_as_fastavro_does(case: tuple[Any, dict[str, Any]]) -> None:
    schema, record = case
    fields, read = record_fields(schema), record_reader(schema)
    assert fields is not None
    out = bytearray()
    write_record(out, fields, record)
    data = fastavro_bytes(schema, record)
    assert bytes(out) == data
    assume(read is not None)  # None: an array of items written as no bytes (tested below)
    assert read is not None
    assert repr(read(data, 0)) == repr((fastavro_read(schema, data)[0], len(data)))


@settings(max_examples=400, deadline=None)
@given(schemas_and_values(), st.data())
def test_whatever_a_reader_reads_fastavro_reads_the_same(
    case: tuple[Any, dict[str, Any]], data: st.DataObject
) -> None:
    """On a valid record's bytes changed at random (cut short, a byte changed, bytes
    added), and on random bytes: a record the reader returns is fastavro's record, ending
    at the same byte; anything else it refuses."""
    schema, record = case
    read = record_reader(schema)
    assume(read is not None)
    assert read is not None
    valid = fastavro_bytes(schema, record)
    raw = data.draw(
        st.one_of(
            st.binary(max_size=24),
            st.integers(0, len(valid)).map(lambda n: valid[:n]),
            st.tuples(st.integers(0, max(len(valid) - 1, 0)), st.integers(0, 255)).map(
                lambda c: valid[: c[0]] + bytes([c[1]]) + valid[c[0] + 1 :]
            ),
            st.binary(min_size=1, max_size=4).map(lambda extra: valid + extra),
        )
    )
    try:
        ours = read(raw, 0)
    except Exception:
        return
    assert repr(ours) == repr(fastavro_read(schema, raw))  # repr: a NaN is its own equal


@pytest.mark.parametrize(
    ("avro_type", "data", "why"),
    [
        ("boolean", b"\x02", "a boolean byte of 2"),
        ("int", b"\x80\x80\x80\x80\x10", "beyond 32 bits"),
        ("long", b"\xff" * 10 + b"\x01", "more than 10 bytes"),
        ("string", b"\x04a", "runs past"),
        ("string", b"\x04\xff\xfe", "can.t decode"),  # not UTF-8
        ({"type": "enum", "name": "K", "symbols": ["A", "B"]}, b"\x04", "no enum symbol 2"),
        (["null", "long"], b"\x04", "no union branch"),
        ({"type": "array", "items": "long"}, b"\x7e\x00", "runs past the bytes"),
    ],
)
def test_bytes_no_record_of_the_schema_has_are_refused(
    avro_type: Any, data: bytes, why: str
) -> None:
    schema = parse_schema(
        {"type": "record", "name": "One", "fields": [{"name": "v", "type": avro_type}]}
    )
    read = record_reader(schema)
    assert read is not None
    with pytest.raises(ValueError, match=why):
        read(data, 0)


def test_an_array_in_blocks_with_sizes_is_read() -> None:
    """A writer may give a block's item count negated, followed by its size in bytes."""
    schema = parse_schema(
        {
            "type": "record",
            "name": "Blocks",
            "fields": [{"name": "v", "type": {"type": "array", "items": "long"}}],
        }
    )
    read = record_reader(schema)
    assert read is not None
    data = b"\x03\x04\x02\x04\x02\x06\x00"  # 2 items in 2 bytes: 1, 2; then 1 item: 3
    assert read(data, 0) == ({"v": [1, 2, 3]}, len(data)) == (fastavro_read(schema, data))


@pytest.mark.parametrize(
    "avro_type",
    [
        {"type": "map", "values": "long"},
        {"type": "fixed", "name": "F", "size": 2},
        {"type": "long", "logicalType": "timestamp-millis"},
        ["null", "long", "string"],
        {"type": "array", "items": "null"},
        {"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}},
    ],
)
def test_other_types_are_left_to_fastavro(avro_type: Any) -> None:
    schema = parse_schema(
        {"type": "record", "name": "Other", "fields": [{"name": "v", "type": avro_type}]}
    )
    assert record_reader(schema) is None
    assert record_fields(schema) is None or avro_type["type"] == "array"


def test_a_recursive_record_is_left_to_fastavro() -> None:
    schema = parse_schema(
        {
            "type": "record",
            "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}],
        }
    )
    assert record_reader(schema) is None
    assert record_fields(schema) is None
