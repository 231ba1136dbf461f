"""The OLTP wire messages, one Avro schema each (schemas/txstream/*.avsc).

Procedure parameters, results and rows are JSON inside the Avro record: they are the
user's free-form values, while everything the protocol itself reads is typed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from fastavro.types import Schema

from txstream.model.declarations import Key, Record
from txstream.schemas.records import decode_record, encode_record
from txstream.schemas.registry import SchemaRegistry

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


@dataclass(frozen=True)
class Query:
    table: str
    isolation: str = "snapshot"
    key: str | None = None
    where: str = "[]"
    aggregates: str = "[]"


class Message:
    """A dataclass with an Avro schema; nested Fragment and Query records come back typed."""

    schema_name: ClassVar[str]

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
    request_id: str
    reply_to: str
    timeout_ms: int
    fragments: list[Fragment] = field(default_factory=list)
    query: Query | None = None


@dataclass(frozen=True)
class TxnResult(Message):
    schema_name = "txstream.TxnResult"
    request_id: str
    txn_id: str
    status: str  # committed | aborted | failed
    reason: str = ""
    detail: str = ""
    results: str = "[]"
    rows: str = "[]"
    partitions: list[int] = field(default_factory=list)

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
    txn_id: str
    epoch: int
    kind: str  # run | prepare | read
    request_id: str
    reply_to: str
    fragments: list[Fragment] = field(default_factory=list)
    query: Query | None = None


@dataclass(frozen=True)
class Decision(Message):
    schema_name = "txstream.Decision"
    txn_id: str
    epoch: int
    commit: bool


@dataclass(frozen=True)
class EngineReply(Message):
    schema_name = "txstream.EngineReply"
    txn_id: str
    partition: int
    kind: str  # result | vote | ack | rows
    ok: bool
    reason: str = ""
    detail: str = ""
    results: str = "[]"
    rows: str = "[]"
    request_id: str = ""
    reply_to: str = ""


@dataclass(frozen=True)
class CoordinatorLog(Message):
    schema_name = "txstream.CoordinatorLog"
    kind: str  # epoch | begin | decision | end
    epoch: int
    txn_id: str = ""
    participants: list[int] = field(default_factory=list)
    commit: bool = False
    reason: str = ""
    request_id: str = ""
    reply_to: str = ""
    results: str = "[]"


class Wire:
    """Encoders and decoders for the OLTP messages, from one schema registry."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self._schemas: dict[str, Schema] = {}
        self._registry = registry

    def _schema(self, name: str) -> Schema:
        schema = self._schemas.get(name)
        if schema is None:
            schema = self._schemas[name] = self._registry.get(name)
        return schema

    def encode(self, message: Message) -> bytes:
        return encode_record(self._schema(message.schema_name), message.record())

    def decode(self, cls: type[M], data: bytes) -> M:
        return cls.from_record(decode_record(self._schema(cls.schema_name), data))
