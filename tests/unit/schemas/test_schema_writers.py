"""The field writers made per record schema write exactly fastavro's bytes, and leave every
record they do not take to fastavro."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from txstream.schemas.codec import BatchCodec, BatchEncodeError
from txstream.schemas.records import RecordEncoder, decode_record, encode_record
from txstream.schemas.writers import flat_fields

SCALARS = ["null", "boolean", "int", "long", "float", "double", "string", "bytes"]

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": LONGS,  # fastavro writes an int field as a long; in a union, only 32-bit ones
    "long": LONGS,
    "float": st.one_of(st.floats(width=32), st.floats(allow_nan=False)),
    "double": st.floats(allow_nan=False),
    "string": st.text(),
    "bytes": st.binary(),
}


def fastavro_bytes(schema: Any, record: Any) -> bytes:
    out = BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


@st.composite
def field_types(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(SCALARS))
    if kind == "null" or not draw(st.booleans()):
        return kind
    return ["null", kind] if draw(st.booleans()) else [kind, "null"]


ANY_VALUE = st.one_of(*VALUES.values(), st.just("NaN"), st.lists(st.integers(), max_size=2))


def value_of(avro_type: Any) -> st.SearchStrategy[Any]:
    """Mostly values of the type, and now and then any value (fastavro takes some)."""
    if isinstance(avro_type, list):
        kind = next(t for t in avro_type if t != "null")
        fitting = st.one_of(st.none(), VALUES[kind])
    else:
        fitting = VALUES[avro_type]
    return st.one_of(fitting, fitting, fitting, ANY_VALUE)


@st.composite
def schemas_and_records(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    types = draw(st.lists(field_types(), max_size=6))
    fields = [{"name": f"f{i}", "type": t} for i, t in enumerate(types)]
    schema: dict[str, Any] = parse_schema({"type": "record", "name": "T", "fields": fields})  # type: ignore[assignment]
    record = st.fixed_dictionaries({f["name"]: value_of(f["type"]) for f in fields})
    return schema, draw(st.lists(record, max_size=4))


@settings(max_examples=300, deadline=None)
@given(schemas_and_records())
def test_a_record_of_scalars_is_written_as_fastavro_writes_it(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    schema, records = case
    assert flat_fields(schema) is not None
    encode = RecordEncoder(schema)
    for record in records:
        data = written(encode, record)
        assert data == written(partial(fastavro_bytes, schema), record)
        if isinstance(data, bytes) and encode.encode(record)[1]:
            # the committed state may keep `record` as reading `data` gives it: the same
            # fields in the same order, each value of the same type
            assert repr(decode_record(schema, data)) == repr(record)
    codec = BatchCodec(schema)
    envelope = {"stream": "s", "batch_id": 7, "tuples": records}
    expected = written(partial(fastavro_bytes, codec.schema), envelope)
    if isinstance(expected, bytes):
        assert codec.encode("s", 7, records) == expected
    else:
        with pytest.raises(BatchEncodeError):
            codec.encode("s", 7, records)


def written(write: Callable[[Any], bytes], record: Any) -> bytes | tuple[type, str]:
    """The bytes, or the error's type and message."""
    try:
        return write(record)
    except Exception as e:
        return type(e), str(e)


SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "n", "type": "long"},
            {"name": "x", "type": "double"},
            {"name": "s", "type": ["null", "string"], "default": None},
            {"name": "d", "type": "int", "default": 5},
        ],
    }
)


@pytest.mark.parametrize(
    "record",
    [
        {"n": True, "x": 1.5},  # a bool for a long
        {"n": 1, "x": 2},  # an int for a double: fastavro writes float(2)
        {"n": 1, "x": "NaN"},  # fastavro writes float("NaN")
        {"n": 1, "x": 1.5, "extra": [1]},  # fields the schema lacks are ignored
        {"n": 1, "x": 1.5},  # defaults
    ],
)
def test_a_record_the_writers_refuse_is_written_by_fastavro(record: dict[str, Any]) -> None:
    assert RecordEncoder(SCHEMA)(record) == fastavro_bytes(SCHEMA, record)


@pytest.mark.parametrize(
    "record",
    [
        {"n": 2**63, "x": 1.5},  # too large for a long
        {"n": "1", "x": 1.5},
        {"x": 1.5},  # no value, no default
        {"n": 1, "x": 1.5, "s": 3},
    ],
)
def test_a_record_fastavro_cannot_write_fails_as_before(record: dict[str, Any]) -> None:
    fast = written(RecordEncoder(SCHEMA), record)
    assert not isinstance(fast, bytes)
    assert fast == written(partial(encode_record, SCHEMA), record)


def test_a_batch_that_does_not_fit_names_its_field() -> None:
    codec = BatchCodec(SCHEMA)
    with pytest.raises(BatchEncodeError, match=r"batch 3 of stream 'rows'.*tuples\[0\]\.n'"):
        codec.encode("rows", 3, [{"n": "one", "x": 1.0}])


@pytest.mark.parametrize(
    "avro_type",
    [
        {"type": "enum", "name": "E", "symbols": ["A"]},
        {"type": "array", "items": "long"},
        {"type": "long", "logicalType": "timestamp-millis"},
        ["null", "long", "string"],
        ["long", "string"],
    ],
)
def test_fastavro_writes_records_of_other_types(avro_type: Any) -> None:
    schema = parse_schema(
        {"type": "record", "name": "R", "fields": [{"name": "v", "type": avro_type}]}
    )
    assert flat_fields(schema) is None
