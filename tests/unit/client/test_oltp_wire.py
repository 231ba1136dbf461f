"""The OLTP wire: every message comes back from its bytes equal, nested records typed; bytes
of one message type, or of nothing, never decode as another (`WireDecodeError` says why)."""

from __future__ import annotations

from dataclasses import asdict
from io import BytesIO

import pytest
from fastavro import schemaless_reader, schemaless_writer

from txstream.config import Settings
from txstream.oltp.messages import (
    MESSAGE_TYPES,
    CoordinatorLog,
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    Message,
    Query,
    TxnRequest,
    TxnResult,
    Wire,
    WireDecodeError,
)
from txstream.schemas.readers import record_reader
from txstream.schemas.registry import SchemaRegistry
from txstream.schemas.writers import record_fields

FRAGMENTS = [Fragment.call(7, "debit", amount=5), Fragment.call(("a", 2), "credit", amount=5)]
MESSAGES: list[Message] = [
    TxnRequest("r1", "app.oltp.out", 3000, FRAGMENTS),
    TxnRequest("r2", "app.oltp.out", 3000, query=Query("accounts", key="[7]")),
    TxnResult("r1", "t1", "committed", results="[1, 2]", partitions=[0, 3]),
    EngineRequest("t1", 2, "prepare", "r1", "app.oltp.out", FRAGMENTS),
    EngineRequest("t2", 2, "read", "r2", "app.oltp.out", query=Query("accounts", "read_committed")),
    Decision("t1", 2, True),
    EngineReply("t1", 3, "vote", False, "constraint_violation", "balance >= 0", epoch=2),
    CoordinatorLog("decision", 2, "t1", [0, 3], True, "", "r1", "app.oltp.out", "[1]"),
]


@pytest.fixture(scope="module")
def wire() -> Wire:
    return Wire(SchemaRegistry(Settings().schema_dir))


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(wire: Wire, message: Message) -> None:
    back = wire.decode(type(message), wire.encode(message))
    assert back == message
    assert back.record() == asdict(message)  # type: ignore[call-overload]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_is_written_and_read_as_fastavro_does(wire: Wire, message: Message) -> None:
    """The per-schema writers and reader (`schemas.writers`, `schemas.readers`) serve
    every message type, with fastavro's bytes and record."""
    schema = SchemaRegistry(Settings().schema_dir).get(message.schema_name)
    assert record_fields(schema) is not None and record_reader(schema) is not None
    out = BytesIO()
    schemaless_writer(out, schema, message.record())
    data = wire.encode(message)
    assert data == message.type_byte + out.getvalue()
    assert wire.decode(type(message), data).record() == schemaless_reader(
        BytesIO(data[1:]), schema, None
    )


def test_a_message_the_writers_refuse_is_written_by_fastavro(wire: Wire) -> None:
    as_tuple = TxnResult("r1", "t1", "committed", partitions=(0, 3))  # type: ignore[arg-type]
    as_list = TxnResult("r1", "t1", "committed", partitions=[0, 3])
    assert wire.encode(as_tuple) == wire.encode(as_list)
    with pytest.raises(ValueError, match="aborted_maybe"):
        wire.encode(EngineRequest("t1", 2, "aborted_maybe", "r1", "app.oltp.out"))


def test_encoding_leaves_the_message_untouched(wire: Wire) -> None:
    request = MESSAGES[0]
    assert isinstance(request, TxnRequest)
    wire.encode(request)
    assert all(isinstance(f, Fragment) for f in request.fragments)


def test_every_message_type_has_its_own_type_byte() -> None:
    assert len({m.type_byte for m in MESSAGE_TYPES}) == len(MESSAGE_TYPES)
    assert all(len(m.type_byte) == 1 for m in MESSAGE_TYPES)


def test_a_failed_result_never_decodes_as_a_decision(wire: Wire) -> None:
    # The exploit: schemaless, these bytes read as Decision("1.2", epoch 3, commit=True).
    result = wire.encode(TxnResult("1.2", "1.3", "failed", "bad_request", "x"))
    with pytest.raises(
        WireDecodeError, match=r"expected a txstream\.Decision, found a txstream\.TxnResult"
    ):
        wire.decode(Decision, result)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_no_message_decodes_as_another_type(wire: Wire, message: Message) -> None:
    data = wire.encode(message)
    for other in MESSAGE_TYPES:
        if other is not type(message):
            with pytest.raises(WireDecodeError, match=f"found a {message.schema_name}"):
                wire.decode(other, data)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "found type byte b''"),
        (b"\xca", "found type byte"),  # fastavro used to raise IndexError on this one
        (b"D\xca", "IndexError"),
        (b"D\x06abc", "IndexError"),  # the epoch after the txn_id is missing
        (b"D\x08abc", "a length of 4 at 2 runs past"),  # the txn_id runs past the end
        (b"D\x04\xff\xfe\x02\x01", "UnicodeDecodeError"),
        (b"D\x02a\x02\x01\x00", "1 bytes after the record"),
    ],
)
def test_garbage_is_a_wire_decode_error_naming_why(wire: Wire, data: bytes, why: str) -> None:
    with pytest.raises(WireDecodeError, match=why):
        wire.decode(Decision, data)


def test_truncated_records_are_wire_decode_errors(wire: Wire) -> None:
    for message in MESSAGES:
        data = wire.encode(message)
        for cut in range(1, len(data)):
            with pytest.raises(WireDecodeError):
                wire.decode(type(message), data[:cut])
