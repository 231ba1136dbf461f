"""Proof of origin (`oltp.origin`): the records only services write carry a tag under the
stack's key, a reader with the key refuses one without it or with another key's, and
promised transactions, which clients write, carry none. The key file is made once, 0600,
and every process of the stack reads the same one."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest
from pydantic import SecretStr

from txstream.config import Settings
from txstream.oltp.messages import (
    CoordinatorLog,
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    Message,
    TxnRequest,
    TxnResult,
    Wire,
)
from txstream.oltp.origin import KEY_FILE, TAG_BYTES, Origin, Unauthenticated
from txstream.schemas.registry import SchemaRegistry

KEY = b"k" * 32
SERVICES: list[Message] = [
    EngineRequest("1.1", 1, "prepare", "r1", "app.oltp.out", [Fragment.call(7, "debit")]),
    Decision("1.1", 1, True),
    EngineReply("1.1", 3, "vote", True, epoch=1),
    CoordinatorLog("decision", 1, "1.1", [0, 3], True, "", "r1", "app.oltp.out", "[1]"),
]
PROMISE = EngineRequest("1.1", 0, "promise", "r2", "app.oltp.out", [Fragment.call(7, "debit")])


@pytest.fixture(scope="module")
def registry() -> SchemaRegistry:
    return SchemaRegistry(Settings().schema_dir)


@pytest.mark.parametrize("message", SERVICES, ids=lambda m: type(m).__name__)
def test_a_services_record_is_tagged_and_only_the_key_opens_it(
    registry: SchemaRegistry, message: Message
) -> None:
    service = Wire(registry, Origin(KEY))
    data = service.encode(message)
    assert len(data) == len(Wire(registry).encode(message)) + TAG_BYTES
    assert service.decode(type(message), data) == message
    with pytest.raises(Unauthenticated, match=message.schema_name):
        service.decode(type(message), Wire(registry).encode(message))  # a client's
    with pytest.raises(Unauthenticated):
        service.decode(type(message), Wire(registry, Origin(b"x" * 32)).encode(message))
    flipped = bytearray(data)
    flipped[3] ^= 1
    with pytest.raises(Unauthenticated):
        service.decode(type(message), bytes(flipped))


def test_a_promise_is_a_clients_record_and_untagged(registry: SchemaRegistry) -> None:
    service, client = Wire(registry, Origin(KEY)), Wire(registry)
    assert service.encode(PROMISE) == client.encode(PROMISE)
    assert service.decode(EngineRequest, client.encode(PROMISE), promises=True) == PROMISE
    # on the promises topic a coordinator's kind of request is refused, tag or not
    run = EngineRequest("1.1", 1, "run", "r1", "app.oltp.out", [Fragment.call(7, "debit")])
    with pytest.raises(Unauthenticated, match="the topic clients write"):
        service.decode(EngineRequest, client.encode(run), promises=True)
    # and off it, a promise is refused for want of a tag
    with pytest.raises(Unauthenticated):
        service.decode(EngineRequest, client.encode(PROMISE))


@pytest.mark.parametrize("message", [TxnRequest("r", "t", 1, []), TxnResult("r", "t", "committed")])
def test_a_clients_messages_are_never_tagged(registry: SchemaRegistry, message: Message) -> None:
    service = Wire(registry, Origin(KEY))
    assert service.encode(message) == Wire(registry).encode(message)
    assert service.decode(type(message), Wire(registry).encode(message)) == message


def test_the_key_file_is_made_once_private_and_shared(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    origins: list[Origin] = []
    threads = [threading.Thread(target=lambda: origins.append(Origin.of(settings)))
               for _ in range(8)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    path = settings.secrets_dir / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(bytes.fromhex(path.read_text())) == 32
    assert len({o.tag(b"x") for o in origins}) == 1  # every process the same key
    assert list(path.parent.iterdir()) == [path]  # no staged file left behind
    assert Origin.of(settings).tag(b"x") == origins[0].tag(b"x")


def test_a_given_key_is_used_and_a_bad_one_named(tmp_path: Path) -> None:
    given = Settings(home=tmp_path, internal_key=SecretStr(KEY.hex()))
    assert Origin.of(given).tag(b"x") == Origin(KEY).tag(b"x")
    assert not (given.secrets_dir / KEY_FILE).exists()
    with pytest.raises(ValueError, match="TXSTREAM_INTERNAL_KEY"):
        Origin.of(Settings(home=tmp_path, internal_key=SecretStr("not hex")))
    with pytest.raises(ValueError, match="16 or more"):
        Origin.of(Settings(home=tmp_path, internal_key=SecretStr("abcd")))


def test_a_reader_never_makes_a_key_of_its_own(tmp_path: Path) -> None:
    """`verify` reads a stack's records: with a new key it would take every one for a
    forgery, so it asks for the stack's, naming where it looked."""
    settings = Settings(home=tmp_path)
    with pytest.raises(ValueError, match=r"no internal key at .*internal\.key"):
        Origin.of(settings, create=False)
    assert not (settings.secrets_dir / KEY_FILE).exists()
    made = Origin.of(settings)
    assert Origin.of(settings, create=False).tag(b"x") == made.tag(b"x")
