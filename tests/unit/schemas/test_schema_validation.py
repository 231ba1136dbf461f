"""find_error: the first mismatch between a datum and its schema, as a field path."""

from __future__ import annotations

from typing import Any

import pytest
from fastavro import parse_schema

from txstream.schemas import DatumError, find_error

LOCATION = {
    "type": "record",
    "name": "Location",
    "fields": [{"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}],
}
EVENT = parse_schema(
    {
        "type": "record",
        "name": "Event",
        "namespace": "t",
        "fields": [
            {"name": "id", "type": "int"},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
            {"name": "where", "type": ["null", LOCATION], "default": None},
            {"name": "counts", "type": {"type": "map", "values": "long"}, "default": {}},
            {"name": "seen", "type": "boolean", "default": False},
        ],
    }
)


def test_a_fitting_datum_has_no_error() -> None:
    datum = {"id": 1, "tags": ["a"], "where": {"lat": 1.5, "lon": 2}, "counts": {"x": 3}}
    assert find_error(datum, EVENT) is None


@pytest.mark.parametrize(
    ("datum", "error"),
    [
        ({"id": "abc"}, DatumError("id", 'expected int, got "abc"')),
        ({"id": 2**31}, DatumError("id", "expected int, got 2147483648")),
        ({"id": True}, DatumError("id", "expected int, got true")),
        ({}, DatumError("id", "missing; expected int")),
        ({"id": 1, "colour": "red"}, DatumError("colour", "not a field of t.Event")),
        ({"id": 1, "tags": ["a", 7]}, DatumError("tags[1]", "expected string, got 7")),
        (
            {"id": 1, "where": {"lat": 1.0, "lon": "x"}},
            DatumError("where.lon", 'expected double, got "x"'),
        ),
        (
            {"id": 1, "where": 5},
            DatumError("where", "expected null or record t.Location (a JSON object), got 5"),
        ),
        ({"id": 1, "counts": {"x": 1.5}}, DatumError('counts["x"]', "expected long, got 1.5")),
        ({"id": 1, "seen": 0}, DatumError("seen", "expected boolean, got 0")),
        ([1, 2], DatumError("", "expected record t.Event (a JSON object), got [1, 2]")),
    ],
)
def test_the_first_mismatch_is_named_by_its_path(datum: Any, error: DatumError) -> None:
    assert find_error(datum, EVENT) == error


def test_the_message_reads_as_a_sentence() -> None:
    assert str(DatumError("id", "expected int, got 1.5")) == "field 'id': expected int, got 1.5"
    assert str(DatumError("", "expected record t.Event")) == "expected record t.Event"


def test_long_values_are_cut_short() -> None:
    error = find_error({"id": "x" * 500}, EVENT)
    assert error is not None
    assert len(error.message) < 100
    assert error.message.startswith('expected int, got "xxx')
    assert error.message.endswith("...")
