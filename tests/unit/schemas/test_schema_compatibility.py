"""Schema evolution verdicts from Apache Avro, and proof with real data that they hold."""

from __future__ import annotations

from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from txstream.schemas import check_compatibility


def vote(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "Vote", "namespace": "leaderboard", "fields": list(fields)}


PHONE_INT = {"name": "phone", "type": "int"}
PHONE_LONG = {"name": "phone", "type": "long"}
STATE = {"name": "state", "type": "string"}
SOURCE_DEFAULT = {"name": "source", "type": "string", "default": "sms"}
SOURCE_REQUIRED = {"name": "source", "type": "string"}


def test_adding_a_field_with_a_default_is_compatible() -> None:
    result = check_compatibility(
        reader=vote(PHONE_INT, STATE, SOURCE_DEFAULT), writer=vote(PHONE_INT, STATE)
    )
    assert result.compatible
    assert result.messages == ()


def test_adding_a_field_without_a_default_is_not() -> None:
    result = check_compatibility(
        reader=vote(PHONE_INT, STATE, SOURCE_REQUIRED), writer=vote(PHONE_INT, STATE)
    )
    assert not result.compatible
    assert result.messages == (
        "field 'source' is in the reader but not the writer, and has no default to fill it",
    )


def test_int_to_long_promotion_is_compatible() -> None:
    assert check_compatibility(reader=vote(PHONE_LONG), writer=vote(PHONE_INT)).compatible


def test_long_to_int_is_not() -> None:
    result = check_compatibility(reader=vote(PHONE_INT), writer=vote(PHONE_LONG))
    assert not result.compatible
    assert result.messages == (
        "field 'phone': reader type: int not compatible with writer type: long",
    )


def test_several_problems_are_all_reported() -> None:
    result = check_compatibility(
        reader=vote(PHONE_INT, STATE, SOURCE_REQUIRED), writer=vote(PHONE_LONG, STATE)
    )
    assert not result.compatible
    text = "\n".join(result.messages)
    assert "2 incompatibilities" in text
    assert "field 'phone'" in text
    assert "field 'source'" in text


def test_removing_an_enum_symbol_is_not_compatible() -> None:
    def kind(*symbols: str) -> dict[str, Any]:
        enum = {"type": "enum", "name": "Kind", "symbols": list(symbols)}
        return vote({"name": "kind", "type": enum})

    assert check_compatibility(
        reader=kind("SMS", "WEB", "APP"), writer=kind("SMS", "WEB")
    ).compatible
    narrower = check_compatibility(reader=kind("SMS"), writer=kind("SMS", "WEB"))
    assert not narrower.compatible
    assert "WEB" in narrower.messages[0]


def write_with(schema: Any, records: list[dict[str, Any]]) -> list[bytes]:
    out = []
    for record in records:
        buf = BytesIO()
        schemaless_writer(buf, schema, record)
        out.append(buf.getvalue())
    return out


def test_a_compatible_verdict_holds_for_real_data() -> None:
    old = parse_schema(vote(PHONE_INT, STATE))
    new = parse_schema(vote(PHONE_LONG, STATE, SOURCE_DEFAULT))
    assert check_compatibility(reader=new, writer=old).compatible

    written = [{"phone": 2_000_000_000, "state": "MA"}, {"phone": -5, "state": "NY"}]
    read = [schemaless_reader(BytesIO(data), old, new) for data in write_with(old, written)]
    assert read == [
        {"phone": 2_000_000_000, "state": "MA", "source": "sms"},
        {"phone": -5, "state": "NY", "source": "sms"},
    ]


def test_an_incompatible_verdict_matches_a_failing_read() -> None:
    old = parse_schema(vote(PHONE_INT, STATE))
    new = parse_schema(vote(PHONE_INT, STATE, SOURCE_REQUIRED))
    assert not check_compatibility(reader=new, writer=old).compatible
    (data,) = write_with(old, [{"phone": 1, "state": "MA"}])
    with pytest.raises(Exception, match="source"):
        schemaless_reader(BytesIO(data), old, new)
