"""The OLTP wire: every message comes back from its Avro bytes equal, nested records typed."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from txstream.config import Settings
from txstream.oltp.messages import (
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
)
from txstream.schemas.registry import SchemaRegistry

FRAGMENTS = [Fragment.call(7, "debit", amount=5), Fragment.call(("a", 2), "credit", amount=5)]
MESSAGES: list[Message] = [
    TxnRequest("r1", "app.oltp.out", 3000, FRAGMENTS),
    TxnRequest("r2", "app.oltp.out", 3000, query=Query("accounts", key="[7]")),
    TxnResult("r1", "t1", "committed", results="[1, 2]", partitions=[0, 3]),
    EngineRequest("t1", 2, "prepare", "r1", "app.oltp.out", FRAGMENTS),
    EngineRequest("t2", 2, "read", "r2", "app.oltp.out", query=Query("accounts", "read_committed")),
    Decision("t1", 2, True),
    EngineReply("t1", 3, "vote", False, "constraint_violation", "balance >= 0"),
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


def test_encoding_leaves_the_message_untouched(wire: Wire) -> None:
    request = MESSAGES[0]
    assert isinstance(request, TxnRequest)
    wire.encode(request)
    assert all(isinstance(f, Fragment) for f in request.fragments)
