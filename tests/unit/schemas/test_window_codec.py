"""A window's state record put together from its tuples' encodings is fastavro's record,
byte for byte, and the state it hands back is what decoding that record gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from fastavro import parse_schema

from txstream.engine.windows import Row, WindowState, from_record, state_schema, to_record
from txstream.schemas.records import RecordEncoder, decode_record, encode_record
from txstream.state.window_codec import WindowCodec

TUPLE: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "tests",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
STATE = parse_schema(state_schema(TUPLE))


def reading(i: int, **extra: Any) -> Row:
    return {"id": i, "score": i / 4, "tags": [f"t{i}"] * (i % 3), "note": None, **extra}


def reference(state: WindowState) -> bytes:
    return encode_record(STATE, to_record(state))


def decoded(data: bytes) -> WindowState:
    return from_record(decode_record(STATE, data))


@pytest.mark.parametrize(
    "state",
    [
        WindowState(),
        WindowState((reading(1),), ()),
        WindowState((), tuple(reading(i) for i in range(70))),  # a count over one varint byte
        WindowState((reading(8), reading(9)), (reading(1),), 10),
        WindowState((reading(2),), (), -3),
        WindowState((), (reading(3),), 2**62),
    ],
)
def test_a_state_encodes_as_fastavro_encodes_its_record(state: WindowState) -> None:
    data, back = WindowCodec(TUPLE).encode(state)
    assert data == reference(state)
    assert back == decoded(data)
    assert back.flat == decoded(data).flat


def test_a_sliding_window_encodes_right_while_its_tuples_are_reused() -> None:
    codec = WindowCodec(TUPLE)
    visible: tuple[Row, ...] = ()
    for start in range(0, 60, 5):
        staged = tuple(reading(i) for i in range(start, start + 5))
        state = WindowState(staged, visible)
        data, back = codec.encode(state)
        assert data == reference(state)
        assert back == decoded(data)
        visible = (*visible, *staged)[-20:]  # the next state shares these tuple objects


def test_the_state_handed_back_is_the_records_not_the_tuples_as_put() -> None:
    # An int in a double field and a field the schema lacks, as a procedure might insert
    # them: RocksDB holds 3.0 and no `extra`, and so does the state handed back.
    put = {"id": 1, "score": 3, "tags": ["a"], "note": "n", "extra": True}
    data, back = WindowCodec(TUPLE).encode(WindowState((put,), ()))
    assert data == reference(WindowState((put,), ()))
    (got,) = back.staged
    assert got == {"id": 1, "score": 3.0, "tags": ["a"], "note": "n"}
    assert type(got["score"]) is float
    assert not back.flat  # a list field: copies of these tuples must be deep


def test_a_tuple_that_does_not_fit_the_schema_fails_the_encoding() -> None:
    with pytest.raises(ValueError, match="score"):
        WindowCodec(TUPLE).encode(WindowState(({"id": 1, "tags": []},), ()))


def test_each_tuple_is_encoded_once_while_it_stays_in_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from txstream.state import window_codec

    encoded: list[int] = []

    class Counting(RecordEncoder):
        def encode(self, record: Mapping[str, Any]) -> tuple[bytes, bool]:
            encoded.append(record["id"])
            return super().encode(record)

    monkeypatch.setattr(window_codec, "RecordEncoder", Counting)
    codec = WindowCodec(TUPLE)
    committed = WindowState()
    for start in range(0, 30, 5):
        # As the engine does: the next state holds the committed state's tuples (the ones
        # handed back), and the new ones a TE inserted.
        staged = tuple(reading(i) for i in range(start, start + 5))
        state = WindowState(staged, (*committed.staged, *committed.visible)[-10:])
        data, committed = codec.encode(state)
        assert data == reference(state)
    assert sorted(encoded) == list(range(30))


FLAT: dict[str, Any] = {
    "type": "record",
    "name": "Flat",
    "namespace": "tests",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def test_a_flat_state_handed_back_is_as_its_record_decodes() -> None:
    """A tuple of scalars that decodes back to itself is handed back as it is; one that
    does not (an int in a double field, a field the schema lacks) as its record decodes."""
    exact = {"id": 1, "score": 0.5, "note": "n"}
    inexact: list[Row] = [{"id": 2, "score": 3, "note": None}, {"id": 3, "score": 1.0, "x": 1}]
    state = WindowState((exact, *inexact), ())
    data, back = WindowCodec(FLAT).encode(state)
    schema = parse_schema(state_schema(FLAT))
    assert data == encode_record(schema, to_record(state))
    assert repr(back.staged) == repr(from_record(decode_record(schema, data)).staged)
    assert back.staged[0] is exact and back.flat
