"""The batch envelope and its codec: round trips, one-schema decoding, and error messages."""

from __future__ import annotations

import json
from io import BytesIO
from typing import Any

import avro.io
import avro.schema
import pytest
from fastavro import parse_schema, schemaless_reader

from txstream.schemas import (
    ENVELOPE,
    Batch,
    BatchCodec,
    BatchDecodeError,
    BatchEncodeError,
    SchemaError,
    envelope_schema,
    to_avsc,
)

VOTE = {
    "type": "record",
    "name": "Vote",
    "namespace": "leaderboard",
    "fields": [
        {"name": "phone", "type": "long"},
        {"name": "state", "type": "string"},
        {"name": "contestant_number", "type": "int"},
    ],
}
VOTES = [
    {"phone": 6175550101, "state": "MA", "contestant_number": 3},
    {"phone": 2125550199, "state": "NY", "contestant_number": 1},
]


def test_a_batch_round_trips_in_order() -> None:
    codec = BatchCodec(VOTE)
    batch = codec.decode(codec.encode("votes", 41, VOTES))
    assert batch == Batch("votes", 41, VOTES)


def test_an_empty_batch_round_trips() -> None:
    codec = BatchCodec(VOTE)
    assert codec.decode(codec.encode("votes", 1, [])) == Batch("votes", 1, [])


def test_the_envelope_carries_the_streams_own_tuple_record() -> None:
    envelope = envelope_schema(VOTE)
    assert envelope["name"] == ENVELOPE
    fields = {f["name"]: f["type"] for f in envelope["fields"]}
    assert list(fields) == ["stream", "batch_id", "tuples"]
    assert fields["stream"] == "string"
    assert fields["batch_id"] == "long"
    assert fields["tuples"]["type"] == "array"
    assert fields["tuples"]["items"]["name"] == "leaderboard.Vote"


def test_one_standalone_schema_decodes_a_batch_with_apache_avro() -> None:
    """What Spark does: decode the value with one JSON schema and another Avro library."""
    codec = BatchCodec(VOTE)
    data = codec.encode("votes", 9, VOTES)
    schema = avro.schema.parse(json.dumps(to_avsc(codec.schema)))
    decoded = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(BytesIO(data)))
    assert decoded == {"stream": "votes", "batch_id": 9, "tuples": VOTES}


def test_a_tuple_record_without_namespace_keeps_its_name() -> None:
    bare: dict[str, Any] = {**VOTE, "name": "Vote"}
    del bare["namespace"]
    codec = BatchCodec(bare)
    assert codec.tuple_name == "Vote"
    data = codec.encode("votes", 1, VOTES)
    assert codec.decode(data).tuples == VOTES
    # The standalone schema must say so explicitly, or the name would join `txstream`.
    standalone = to_avsc(codec.schema)
    item = standalone["fields"][2]["type"]["items"]
    assert (item["name"], item["namespace"]) == ("Vote", "")
    reparsed = parse_schema(standalone)
    decoded = schemaless_reader(BytesIO(data), reparsed, None)
    assert isinstance(decoded, dict)
    assert decoded["tuples"] == VOTES


def test_a_bad_tuple_is_named_by_its_path() -> None:
    codec = BatchCodec(VOTE)
    bad = [VOTES[0], {**VOTES[1], "phone": "not a number"}]
    with pytest.raises(BatchEncodeError, match=r"tuples\[1\]\.phone': expected long") as info:
        codec.encode("votes", 3, bad)
    assert "batch 3 of stream 'votes'" in str(info.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x0avotes\x02", "not a batch envelope of leaderboard.Vote"),
        (b"\x0avotes\x02\x00" + b"trailing", "8 bytes left over"),
    ],
)
def test_bytes_that_are_not_an_envelope_are_rejected(data: bytes, reason: str) -> None:
    with pytest.raises(BatchDecodeError, match=reason):
        BatchCodec(VOTE).decode(data)


def test_a_tuple_schema_must_be_a_record() -> None:
    with pytest.raises(SchemaError, match="must be a record"):
        envelope_schema("string")
