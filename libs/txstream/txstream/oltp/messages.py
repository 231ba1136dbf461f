"""The OLTP wire messages, one Avro schema each (schemas/txstream/*.avsc).

Procedure parameters, results and rows are JSON inside the Avro record: they are the
user's free-form values, while everything the protocol itself reads is typed.

On the wire each message is one type byte, then its schemaless Avro record. Schemaless
Avro carries no type of its own, so without the byte one message's bytes decode as another
(a client's failed result, written to the decisions topic, read as a COMMIT of the
transaction its request_id named). `Wire.decode` takes only the byte of the type it was
asked for, and only a record that uses up every byte.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any, ClassVar, TypeVar, cast

from fastavro import schemaless_reader, schemaless_writer
from fastavro.types import Schema

from txstream.model.declarations import Key, Record
from txstream.oltp.origin import Origin, Unauthenticated
from txstream.schemas.readers import record_reader
from txstream.schemas.registry import SchemaRegistry
from txstream.schemas.writers import record_fields, write_record

M = TypeVar("M", bound="Message")


def key_json(key: Key) -> str:
    return json.dumps(list(key))


def key_of(text: str) -> Key:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"key {text!r} is not JSON: {e}") from e
    if not isinstance(value, list) or not all(isinstance(k, int | str) for k in value):
        raise ValueError(f"a key must be a JSON list of ints and strings, not {text!r}")
    return tuple(value)


@dataclass(frozen=True)
class Fragment:
    key: str
    procedure: str
    params: str

    @classmethod
    def call(cls, key: Key | int | str, procedure: str, **params: Any) -> Fragment:
        k = key if isinstance(key, tuple) else (key,)
        return cls(key_json(k), procedure, json.dumps(params))

    def args(self) -> Record:
        value: Record = json.loads(self.params)
        return value


def fragments_from_json(raw: Any) -> list[Fragment]:
    """`[{"key": 1 or [..], "procedure": ..., "params": {...}}]`, as the CLI and HTTP take
    it, to fragments; an error names the fragment at fault."""
    if not isinstance(raw, list):
        raise ValueError('fragments must be a JSON list of {"key", "procedure", "params"}')
    out = []
    for i, f in enumerate(raw):
        if not isinstance(f, dict) or "key" not in f or "procedure" not in f:
            raise ValueError(f"fragment {i} needs 'key' and 'procedure'")
        params = f.get("params", {})
        if not isinstance(params, dict):
            raise ValueError(f"fragment {i}: params must be an object")
        key = key_of(json.dumps(f["key"] if isinstance(f["key"], list) else [f["key"]]))
        out.append(Fragment(key_json(key), str(f["procedure"]), json.dumps(params)))
    return out


# What a query may see: each engine's committed rows as they stand; every engine as of one
# batch of the spanning stream, the oldest any engine had run, once no prepared 2PC
# transaction holds its rows; the same as of the newest batch any engine had run.
ISOLATIONS = ("read_committed", "snapshot", "serializable")


@dataclass(frozen=True)
class Query:
    table: str
    isolation: str = "snapshot"
    key: str | None = None
    where: str = "[]"
    aggregates: str = "[]"
    at: int | None = None  # a cut (snapshot, serializable): the spanning batch to read as of


class WireDecodeError(ValueError):
    """Bytes that are not a record of the message type they were read as."""


class Message:
    """A dataclass with an Avro schema; nested Fragment and Query records come back typed."""

    schema_name: ClassVar[str]
    type_byte: ClassVar[bytes]  # first byte on the wire: which message this is

    def record(self) -> dict[str, Any]:
        """The fields as Avro takes them; a shallow copy, since `asdict`'s deep copy cost
        the coordinator a third of its time."""
        out = dict(self.__dict__)
        if "fragments" in out:
            out["fragments"] = [f.__dict__ for f in out["fragments"]]
        if out.get("query") is not None:
            out["query"] = out["query"].__dict__
        return out

    @classmethod
    def from_record(cls: type[M], record: dict[str, Any]) -> M:
        if "fragments" in record:
            record["fragments"] = [Fragment(**f) for f in record["fragments"]]
        if record.get("query") is not None:
            record["query"] = Query(**record["query"])
        return cls(**record)


@dataclass(frozen=True)
class TxnRequest(Message):
    schema_name = "txstream.TxnRequest"
    type_byte = b"Q"
    request_id: str
    reply_to: str
    timeout_ms: int
    fragments: list[Fragment] = field(default_factory=list)
    query: Query | None = None


@dataclass(frozen=True)
class TxnResult(Message):
    schema_name = "txstream.TxnResult"
    type_byte = b"R"
    request_id: str
    txn_id: str
    status: str  # committed | aborted | failed
    reason: str = ""
    detail: str = ""
    results: str = "[]"
    rows: str = "[]"
    partitions: list[int] = field(default_factory=list)
    at: int | None = None  # a cut query's batch of the spanning stream (snapshot, serializable)

    @property
    def ok(self) -> bool:
        return self.status == "committed"

    def values(self) -> list[Any]:
        out: list[Any] = json.loads(self.results)
        return out

    def table_rows(self) -> list[tuple[Key, Record]]:
        return [(tuple(k), r) for k, r in json.loads(self.rows)]


@dataclass(frozen=True)
class EngineRequest(Message):
    schema_name = "txstream.EngineRequest"
    type_byte = b"E"
    txn_id: str
    epoch: int
    kind: str  # run | prepare | read (the coordinator's); promise | base | direct (a client's)
    request_id: str
    reply_to: str
    fragments: list[Fragment] = field(default_factory=list)
    query: Query | None = None


class _Ids:
    """Request ids unique without a random draw each: 64 random bits per process (drawn
    again in a forked child), then a count. uuid4's draw, a system call, was 4% of a busy
    client's time."""

    def __init__(self) -> None:
        self.renew()
        os.register_at_fork(after_in_child=self.renew)

    def renew(self) -> None:
        self.prefix, self.count = secrets.token_hex(8), itertools.count()

    def next(self) -> str:
        return f"{self.prefix}{next(self.count):x}"


_ids = _Ids()


def request_id_for(reply_partition: int) -> str:
    """A new request id whose answer goes to partition `reply_partition` of the client
    reply topic (`reply_partition`)."""
    return f"r{reply_partition}-{_ids.next()}"


def reply_partition(request_id: str, partitions: int) -> int:
    """The partition of the client reply topic (`partitions` of them) that a request's
    answer goes to: the one its client reads, named in its id (`r<k>-...`, made by
    `request_id_for`), so that each client reads its own answers and no one else's; 0 for
    any other id, or one naming a partition the topic does not have."""
    if not request_id.startswith("r"):
        return 0
    head, sep, _ = request_id[1:].partition("-")
    if not sep or not head.isdigit():
        return 0
    k = int(head)
    return k if k < partitions else 0


# The engine request kinds a client writes, on the promises topic; the coordinator the rest.
# A direct one is a single-partition ACID transaction sent straight to its partition.
CLIENT_REQUEST_KINDS = frozenset({"promise", "base", "direct"})
# The `reply_to` of a direct transaction whose client waits on the worker's endpoint for
# its answer (`runtime.direct_calls`): the engine answers it there once its group is
# committed, and writes no answer to Kafka. No topic can have this name.
ENDPOINT_REPLY = "@endpoint"


@dataclass(frozen=True)
class Decision(Message):
    schema_name = "txstream.Decision"
    type_byte = b"D"
    txn_id: str
    epoch: int
    commit: bool


@dataclass(frozen=True)
class EngineReply(Message):
    schema_name = "txstream.EngineReply"
    type_byte = b"Y"
    txn_id: str
    partition: int
    kind: str  # result | vote | ack | rows | promise | base
    ok: bool
    reason: str = ""
    detail: str = ""
    results: str = "[]"
    rows: str = "[]"
    request_id: str = ""
    reply_to: str = ""
    epoch: int = 0  # a vote: its prepare's epoch, which the decision must carry
    # a cut read's rows: the spanning batch they are as of; its refusal (too_old): the cut
    at: int | None = None


@dataclass(frozen=True)
class CoordinatorLog(Message):
    schema_name = "txstream.CoordinatorLog"
    type_byte = b"L"
    kind: str  # epoch | begin | decision | end | serialized | totals | positions
    epoch: int
    txn_id: str = ""
    participants: list[int] = field(default_factory=list)
    commit: bool = False
    reason: str = ""
    request_id: str = ""
    reply_to: str = ""
    results: str = "[]"


MESSAGE_TYPES: tuple[type[Message], ...] = (
    TxnRequest,
    TxnResult,
    EngineRequest,
    Decision,
    EngineReply,
    CoordinatorLog,
)
_BY_TYPE_BYTE = {m.type_byte: m.schema_name for m in MESSAGE_TYPES}


def type_byte_of(schema_name: str) -> bytes | None:
    """The type byte OLTP messages of `schema_name` start with; None for other records."""
    return next((m.type_byte for m in MESSAGE_TYPES if m.schema_name == schema_name), None)


class _Codec:
    """One message type's schema, with its writers and reader (`schemas.writers`,
    `schemas.readers`) when the schema has only the types they take."""

    __slots__ = ("fields", "read", "schema")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.fields = record_fields(schema)
        self.read = record_reader(schema)


class Wire:
    """Encoders and decoders for the OLTP messages, from one schema registry.

    With an `origin` (a service's wire), records of the types only services write
    (`SERVICE_TYPES`) are tagged when encoded and must be when decoded (`oltp.origin`),
    but for promised transactions, which clients write. Without one (a client's), nothing
    is tagged or checked."""

    def __init__(self, registry: SchemaRegistry, origin: Origin | None = None) -> None:
        self._codecs: dict[str, _Codec] = {}
        self._registry = registry
        self._origin = origin

    def _codec(self, name: str) -> _Codec:
        codec = self._codecs.get(name)
        if codec is None:
            codec = self._codecs[name] = _Codec(self._registry.get(name))
        return codec

    def encode(self, message: Message) -> bytes:
        data = self._encode(message)
        if self._origin is not None and _tagged(message):
            return self._origin.sign(data)
        return data

    def _encode(self, message: Message) -> bytes:
        codec = self._codec(message.schema_name)
        record = message.record()
        if codec.fields is not None:
            out = bytearray(message.type_byte)
            try:
                write_record(out, codec.fields, record)
            except Exception:
                pass  # fastavro writes it, or says why it cannot
            else:
                return bytes(out)
        buf = BytesIO()
        buf.write(message.type_byte)
        schemaless_writer(buf, codec.schema, record)
        return buf.getvalue()

    def decode(self, cls: type[M], data: bytes, promises: bool = False) -> M:
        """The message, or `WireDecodeError` saying why these bytes are not one: garbage
        makes a reader raise almost anything (IndexError, EOFError, UnicodeDecodeError, ...),
        and every reader must be able to move past it. `promises`: the record is from the
        promises topic, which clients write, so it carries no tag; one of any other kind
        there is refused."""
        if self._origin is not None and cls in SERVICE_TYPES:
            if promises:
                message = self._decode(cls, data)
                if _tagged(message):
                    raise Unauthenticated(f"a {cls.schema_name} that only services write, "
                                          "on the topic clients write")  # fmt: skip
                return message
            data = self._origin.strip(data, cls.schema_name)
        return self._decode(cls, data)

    def _decode(self, cls: type[M], data: bytes) -> M:
        head = data[:1]
        if head != cls.type_byte:
            found = _BY_TYPE_BYTE.get(head)
            what = f"a {found}" if found else f"type byte {head!r}"
            raise WireDecodeError(f"expected a {cls.schema_name}, found {what}")
        codec = self._codec(cls.schema_name)
        try:
            if codec.read is not None:
                record, end = codec.read(data, 1)
            else:
                buf = BytesIO(data)
                buf.seek(1)
                record = cast(dict[str, Any], schemaless_reader(buf, codec.schema, None))
                end = buf.tell()
            message = cls.from_record(record)
        except Exception as e:
            raise WireDecodeError(f"not a {cls.schema_name}: {type(e).__name__}: {e}") from e
        left = len(data) - end
        if left:
            raise WireDecodeError(f"not a {cls.schema_name}: {left} bytes after the record")
        return message


# The messages only services write: the coordinator's requests, decisions and log, and the
# engines' replies. Clients write transaction requests and promised transactions.
SERVICE_TYPES: frozenset[type[Message]] = frozenset(
    {EngineRequest, Decision, EngineReply, CoordinatorLog}
)


def _tagged(message: Message) -> bool:
    """Whether `message` carries the stack's tag: a service's, not a promise's."""
    if isinstance(message, EngineRequest):
        return message.kind not in CLIENT_REQUEST_KINDS
    return type(message) in SERVICE_TYPES
