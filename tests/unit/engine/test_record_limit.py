"""The record limit's cheap bound never under-counts a changelog record, so no row it clears
without encoding can be too large for Kafka."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from fastavro import parse_schema

from leaderboard.dataflow import Params, build_app
from txstream.commit.group_commit import MAX_ERROR_CHARS, capped
from txstream.commit.record_limit import RecordLimit, RowBound
from txstream.config import Settings
from txstream.engine.windows import WindowState
from txstream.engine.writeset import WriteSet
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Key, Record
from txstream.model.errors import TxnAbort
from txstream.schemas.records import encode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.state.keys import encode_key

WIDE = "é€😀" * 50  # 2, 3 and 4 bytes a character in UTF-8


@pytest.mark.parametrize(
    ("table", "key", "row"),
    [
        ("stats", ("accepted",), {"value": -(2**63)}),
        ("contestants", (7,), {"contestant_number": 7, "contestant_name": "", "num_votes": 0}),
        ("contestants", (7,), {"contestant_number": 7, "contestant_name": WIDE, "num_votes": 1}),
        ("votes_by_contestant", (3, 2**40), {}),
        ("stats", (b"\x00" * 5000,), {"value": 1}),  # each NUL escaped to two bytes
        ("stats", ("\x00" * 5000,), {"value": 1}),
    ],
)
def test_the_bound_is_at_least_the_encoded_record(table: str, key: Key, row: Record) -> None:
    codec = StateCodec(build_app(Params()).dataflow(), SchemaRegistry(Settings().schema_dir))
    encoded = len(codec.key(table, key)) + len(codec.encode_row(table, row))
    assert RowBound(table, codec.tables[table]).size(key, row) >= encoded


EVERY_KIND = parse_schema(
    {
        "type": "record",
        "name": "Every",
        "fields": [
            {"name": "n", "type": "long"},
            {"name": "x", "type": "double"},
            {"name": "flag", "type": "boolean"},
            {"name": "maybe", "type": ["null", "int"]},
            {"name": "text", "type": ["null", "string"]},
            {"name": "blob", "type": "bytes"},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["a", "b"]}},
            {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 5000}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 2},
            },
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "counts", "type": {"type": "map", "values": "long"}},
            {"name": "note", "type": "string", "default": WIDE},
        ],
    }
)


@pytest.mark.parametrize("scale", [0, 1, 40])
def test_the_bound_holds_for_every_kind_of_field(scale: int) -> None:
    """Fixed-size fields are counted from the schema; the rest are measured, as is a
    default the row leaves out."""
    row: Record = {
        "n": -(2**63),
        "x": 1.5,
        "flag": True,
        "maybe": -(2**31),
        "text": WIDE * scale,
        "blob": b"\xff" * 100 * scale,
        "kind": "b",
        "hash": b"h" * 5000,
        "at": datetime(2026, 11, 25, tzinfo=UTC),
        "id": uuid.UUID(int=2**128 - 1),
        "amount": Decimal("-12345678901234567890123456.78"),
        "tags": [WIDE] * scale,
        "counts": {WIDE: 2**62} | {str(i): -1 for i in range(scale)},
    }
    key: Key = ("k" + WIDE * scale, 2**62)
    encoded = len(encode_key(("every", *key))) + len(encode_record(EVERY_KIND, row))
    assert RowBound("every", EVERY_KIND).size(key, row) >= encoded


def test_a_schema_that_is_not_a_record_bounds_every_value() -> None:
    row: Record = {"a": WIDE, "b": [WIDE, WIDE], "c": 1}
    assert RowBound("t", "string").size((1,), row) >= 4 * len(WIDE) * 3


def _checked_limit(limit: int) -> RecordLimit:
    app = build_app(Params())
    registry = SchemaRegistry(Settings().schema_dir)
    codec = StateCodec(app.dataflow(), registry)
    record_check = RecordLimit(limit, AppTopics(app.name), {}, codec)
    record_check.checked = True
    return record_check


def test_checked_sealing_aborts_a_row_that_does_not_match_its_schema() -> None:
    ws = WriteSet()
    ws.put("contestants", (7,), {"contestant_number": "seven", "contestant_name": "x"})
    with pytest.raises(TxnAbort) as e:
        _checked_limit(1_000_000)(ws, [])
    assert e.value.reason == "invalid_row"
    assert "table 'contestants' key (7,)" in str(e.value)
    unchecked = _checked_limit(1_000_000)
    unchecked.checked = False
    assert unchecked(ws, []) == []


def test_checked_sealing_measures_window_states() -> None:
    ws = WriteSet()
    vote = {"vote_id": 1, "phone_number": 1, "contestant_number": 1, "state": "W" * 3000}
    ws.windows["trending_window"] = WindowState((vote,), ())
    assert _checked_limit(10_000)(ws, []) == []
    with pytest.raises(TxnAbort) as e:
        _checked_limit(2_000)(ws, [])
    assert e.value.reason == "output_too_large"


def test_an_abort_text_is_capped() -> None:
    assert capped("x" * MAX_ERROR_CHARS) == "x" * MAX_ERROR_CHARS
    long = capped("y" * (MAX_ERROR_CHARS + 12_345))
    assert long.startswith("y" * MAX_ERROR_CHARS)
    assert long.endswith("... (12,345 more characters)")


def test_a_row_the_bound_cannot_clear_and_off_its_schema_aborts_as_invalid() -> None:
    """Unchecked, such a row is encoded to be measured; that it cannot be encoded must be a
    TxnAbort too: any other exception would escape a nested transaction's record check."""
    record_check = _checked_limit(1_000)
    record_check.checked = False
    ws = WriteSet()
    ws.put("contestants", (7,), {"contestant_number": 7, "contestant_name": ["x" * 2_000]})
    with pytest.raises(TxnAbort) as e:
        record_check(ws, [])
    assert e.value.reason == "invalid_row"
    assert "table 'contestants' key (7,)" in str(e.value)
