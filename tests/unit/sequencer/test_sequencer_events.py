"""Reading one raw record: where it is routed, and which inputs are refused at the door.

Every record a route cannot admit must raise `Rejected` (a dead letter with its reason), never
another exception: anything else would kill the sequencer, which would then re-read the same
record forever under supervision.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

import txstream_sequencer.events as events
from txstream.kafka.routing import partition_of
from txstream.schemas.confluent import RegistryClient, RegistryUnavailable, UnknownSchemaId, frame
from txstream_sequencer.events import Event, EventReader, Rejected

SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "Item",
        "namespace": "test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "owner", "type": ["null", "string"], "default": None},
            {"name": "score", "type": "double", "default": 0.0},
        ],
    }
)
POSITION = ("raw", 3, 17)


def reader(lanes: int = 4, **options: Any) -> EventReader:
    return EventReader(SCHEMA, "json", lanes, **options)


def read(r: EventReader, value: dict[str, Any] | bytes, key: bytes | None = None,
         headers: Any = None) -> Event:  # fmt: skip
    payload = value if isinstance(value, bytes) else json.dumps(value).encode()
    return r.read(POSITION, key, payload, headers)


def rejected(r: EventReader, value: dict[str, Any] | bytes, headers: Any = None) -> Rejected:
    with pytest.raises(Rejected) as caught:
        read(r, value, headers=headers)
    return caught.value


# -- routing -------------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", range(2, 13))
def test_a_keyed_record_goes_where_oltp_routes_its_key(partitions: int) -> None:
    by_id = reader(partitions, key_field="id", batch_id_field="b")
    by_name = reader(partitions, key_field="name", batch_id_field="b")
    for n in range(1000):
        item: dict[str, Any] = {"id": n * 7919 - 3_000_000, "name": f"user-{n}", "b": 1}
        assert read(by_id, item).lane == partition_of((item["id"],), partitions), item
        assert read(by_name, item).lane == partition_of((item["name"],), partitions), item


def test_without_a_key_field_the_kafka_key_is_routed_as_a_string_key() -> None:
    r = reader(7, batch_id_field="b")
    for name in ("alice", "bob", "ζeta", "5551234"):
        event = read(r, {"id": 1, "name": "x", "b": 1}, key=name.encode())
        assert event.lane == partition_of((name,), 7)
    not_utf8 = read(r, {"id": 1, "name": "x", "b": 1}, key=b"\xff\x00")
    assert not_utf8.lane == partition_of(("\udcff\x00",), 7)  # bytes escaped, PEP 383


def test_without_any_key_a_record_stays_on_its_input_partition() -> None:
    assert read(reader(2, batch_id_field="b"), {"id": 1, "name": "x", "b": 1}).lane == 3 % 2


def test_a_record_without_its_key_field_is_rejected_naming_the_field() -> None:
    r = reader(key_field="owner", batch_id_field="b")
    e = rejected(r, {"id": 1, "name": "x", "b": 1})
    assert e.reason == "schema" and "key field 'owner'" in e.error and "missing" in e.error
    assert "key field 'owner'" in rejected(r, {"id": 1, "name": "x", "owner": None, "b": 1}).error


def test_an_absent_key_field_routes_by_its_schema_default_as_the_engine_will_see_it() -> None:
    r = reader(5, key_field="score", batch_id_field="b")
    e = rejected(r, {"id": 1, "name": "x", "b": 1})  # the default, 0.0, is no key either
    assert "key field 'score'" in e.error and "float" in e.error
    by_name = reader(5, key_field="name", batch_id_field="b")
    assert read(by_name, {"id": 1, "name": "n", "b": 1}).lane == partition_of(("n",), 5)


def test_a_key_field_that_is_not_a_key_type_is_rejected() -> None:
    r = reader(key_field="score", batch_id_field="b")
    e = rejected(r, {"id": 1, "name": "x", "score": 1.5, "b": 1})
    assert e.reason == "schema" and "key field 'score'" in e.error and "float" in e.error


# -- poison pills ----------------------------------------------------------------------------


def test_json_nested_past_the_parser_recursion_limit_is_rejected() -> None:
    depth = 100_000
    pill = b'{"id": 1, "name": "x", "b": ' + b"[" * depth + b"]" * depth + b"}"
    e = rejected(reader(batch_id_field="b"), pill)
    assert e.reason == "undecodable"
    assert f"nested deeper than {events.MAX_JSON_DEPTH}" in e.error


def test_json_nested_past_the_limit_but_parseable_is_rejected_too() -> None:
    depth = events.MAX_JSON_DEPTH + 1
    pill = b'{"id": 1, "name": "x", "b": 1, "x": ' + b"[" * depth + b"]" * depth + b"}"
    e = rejected(reader(batch_id_field="b"), pill)
    assert e.reason == "undecodable" and "nested deeper than" in e.error


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"Infinity", "batch id Infinity is not an integer"),
        (b"-Infinity", "batch id -Infinity is not an integer"),
        (b"NaN", "batch id NaN is not an integer"),
        (b"1.5", "batch id 1.5 is not an integer"),
        (b'"seven"', 'batch id "seven" is not an integer'),
        (b"true", "batch id true is not an integer"),
        (b"null", "no batch id"),
        (b"0", "batch id 0 out of range [1, 2^63)"),
        (b"9223372036854775808", "batch id 9223372036854775808 out of range [1, 2^63)"),
    ],
)
def test_a_batch_id_that_is_no_long_is_rejected(raw: bytes, needle: str) -> None:
    pill = b'{"id": 1, "name": "x", "b": ' + raw + b"}"
    e = rejected(reader(batch_id_field="b"), pill)
    assert e.reason == "schema" and "field 'b'" in e.error and needle in e.error, e.error


def test_an_integer_too_long_for_the_parser_is_rejected() -> None:
    e = rejected(reader(batch_id_field="b"), b'{"id": 1, "name": "x", "b": 1' + b"0" * 5000 + b"}")
    assert e.reason == "undecodable" and "not JSON" in e.error


def test_the_largest_long_is_a_batch_id() -> None:
    event = read(reader(batch_id_field="b"), {"id": 1, "name": "x", "b": 2**63 - 1})
    assert event.batch_id == 2**63 - 1


@pytest.mark.parametrize(
    ("header", "needle"),
    [
        (b"9223372036854775808", "batch id 9223372036854775808 out of range [1, 2^63)"),
        (b"Infinity", 'batch id "Infinity" is not an integer'),
    ],
)
def test_a_batch_id_header_that_is_no_long_is_rejected(header: bytes, needle: str) -> None:
    e = rejected(reader(batch_id_header="bid"), {"id": 1, "name": "x"}, [("bid", header)])
    assert e.reason == "schema" and "header 'bid'" in e.error and needle in e.error, e.error


def test_a_string_avro_cannot_encode_is_rejected_before_it_joins_a_batch() -> None:
    e = rejected(reader(batch_id_field="b"), b'{"id": 1, "name": "\\ud800", "b": 1}')
    assert e.reason == "schema" and "UnicodeEncodeError" in e.error


def test_any_other_failure_reading_one_record_rejects_that_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(value: Any, schema: Any) -> None:
        raise KeyError("no such branch")

    monkeypatch.setattr(events, "find_error", broken)
    e = rejected(reader(batch_id_field="b"), {"id": 1, "name": "x", "b": 1})
    assert e.reason == "undecodable" and e.error == "KeyError: 'no such branch'"


# -- Confluent's wire format ---------------------------------------------------------------


class FakeRegistry(RegistryClient):
    """Writer schemas by id from a dict; `down` as a registry that does not answer."""

    def __init__(self, schemas: dict[int, Any], down: bool = False) -> None:
        super().__init__("http://registry.invalid")
        self.known, self.down = schemas, down

    def writer_schema(self, schema_id: int) -> Any:
        if self.down:
            raise RegistryUnavailable("the registry at http://registry.invalid did not answer")
        if schema_id not in self.known:
            raise UnknownSchemaId(f"schema id {schema_id} is not in the registry")
        return self.known[schema_id]


# An older producer's schema: no owner or score (the stream's schema gives their defaults).
WRITER = parse_schema({"type": "record", "name": "Item", "namespace": "test",
                       "fields": [{"name": "id", "type": "long"},
                                  {"name": "name", "type": "string"}]})  # fmt: skip


def framed(schema_id: int, value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, WRITER, value)
    return frame(schema_id, out.getvalue())


def test_a_framed_record_is_read_with_its_writer_schema_into_the_streams() -> None:
    r = EventReader(SCHEMA, "confluent", 4, registry=FakeRegistry({7: WRITER}))
    event = read(r, framed(7, {"id": 1, "name": "a"}))
    assert event.value == {"id": 1, "name": "a", "owner": None, "score": 0.0}


def test_an_unframed_record_or_an_unknown_id_is_a_dead_letter_naming_why() -> None:
    r = EventReader(SCHEMA, "confluent", 4, registry=FakeRegistry({7: WRITER}))
    assert "Confluent's wire format" in rejected(r, b'{"id": 1}').error
    assert "schema id 8" in rejected(r, framed(8, {"id": 1, "name": "a"})).error
    assert rejected(r, frame(7, b"\xff")).reason == "undecodable"


def test_a_registry_that_does_not_answer_is_raised_not_dead_lettered() -> None:
    r = EventReader(SCHEMA, "confluent", 4, registry=FakeRegistry({}, down=True))
    with pytest.raises(RegistryUnavailable):
        read(r, framed(7, {"id": 1, "name": "a"}))
