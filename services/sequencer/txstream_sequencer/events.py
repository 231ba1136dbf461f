"""Raw user events: decoded, checked against the stream's schema, given a batch id and a lane.

Users produce one event per record with any client: JSON (what kcat and most services send),
schemaless Avro of the stream's tuple schema, or Avro in Confluent's wire format (what
confluent-kafka's AvroSerializer sends), read with its writer schema from the registry. An
event that cannot be read, or that does not fit the schema, is not an error of the
sequencer: it becomes a dead letter with the reason.
Everything a sealed batch needs is checked here, before the event joins a batch, so sealing
never fails on input: a failure there would stop the sequencer and, under supervision, make
it re-read the same record forever.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.types import Schema

from txstream.kafka.routing import partition_of
from txstream.schemas.confluent import (
    NotFramed,
    RegistryClient,
    RegistryUnavailable,
    UnknownSchemaId,
    unframe,
)
from txstream.schemas.validation import find_error, shown

MAX_JSON_DEPTH = 64  # nested objects and arrays; far beyond any tuple schema, far below the stack
BATCH_ID_LIMIT = 1 << 63  # batch ids are Avro longs on the border topic and in the lane state

Position = tuple[str, int, int]  # (topic, partition, offset)
Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None


@dataclass(frozen=True)
class Event:
    position: Position
    key: bytes | None
    payload: bytes
    value: dict[str, Any]
    batch_id: int | None
    lane: int

    @property
    def size(self) -> int:
        return len(self.payload)


class Rejected(ValueError):
    """An input record that is not a valid event; `reason` is its dead-letter reason."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__(error)
        self.reason = reason
        self.error = error


@dataclass(frozen=True)
class EventReader:
    """How one route reads its records: format, where the batch id is, what to partition by."""

    schema: Schema
    fmt: str  # "json", "avro" or "confluent"
    lanes: int  # partitions of the border topic
    batch_id_field: str | None = None
    batch_id_header: str | None = None
    key_field: str | None = None
    registry: RegistryClient | None = None  # writer schemas of the "confluent" format

    def read(
        self,
        position: Position,
        key: bytes | None,
        payload: bytes | None,
        headers: Headers,
    ) -> Event:
        """The record as an event, or Rejected with its dead-letter reason.

        Any other failure while reading one record is that record's fault too (nothing here
        touches Kafka or the sequencer's state), so it is rejected with the exception named;
        but a schema registry that does not answer is no record's fault, and is raised.
        """
        try:
            return self._read(position, key, payload or b"", headers)
        except (Rejected, RegistryUnavailable):
            raise
        except Exception as e:
            raise Rejected("undecodable", f"{type(e).__name__}: {e}") from e

    def _read(self, position: Position, key: bytes | None, data: bytes, headers: Headers) -> Event:
        value = self._decode(data)
        batch_id = self._batch_id(value, headers)
        error = find_error(value, self.schema)
        if error is not None:
            raise Rejected("schema", str(error))
        self._check_encodes(value)
        return Event(position, key, data, value, batch_id, self._lane(position, key, value))

    def _decode(self, data: bytes) -> dict[str, Any]:
        if self.fmt == "confluent":
            record = self._confluent(data)
        elif self.fmt == "avro":
            try:
                record = schemaless_reader(io.BytesIO(data), self.schema, None)
            except Exception as e:  # fastavro raises many types for garbage input
                raise Rejected("undecodable", f"not Avro of the stream's schema: {e}") from e
        else:
            try:
                record = json.loads(data)
            except RecursionError:
                raise Rejected("undecodable", _TOO_DEEP) from None
            except ValueError as e:  # also UnicodeDecodeError and over-long integer literals
                raise Rejected("undecodable", f"not JSON: {e}") from e
            if _nested_too_deep(record):
                raise Rejected("undecodable", _TOO_DEEP)
        if not isinstance(record, dict):
            raise Rejected("undecodable", f"expected a JSON object, got {type(record).__name__}")
        return record

    def _confluent(self, data: bytes) -> Any:
        if self.registry is None:
            raise ValueError("the confluent format needs a schema registry")
        try:
            schema_id, body = unframe(data)
            writer = self.registry.writer_schema(schema_id)
        except (NotFramed, UnknownSchemaId) as e:
            raise Rejected("undecodable", str(e)) from e
        try:
            return schemaless_reader(io.BytesIO(body), writer, self.schema)
        except Exception as e:  # fastavro raises many types for garbage or unresolvable input
            raise Rejected(
                "undecodable",
                f"not Avro of schema id {schema_id} read as the stream's schema: "
                f"{type(e).__name__}: {e}",
            ) from e

    def _batch_id(self, value: dict[str, Any], headers: Headers) -> int | None:
        if self.batch_id_field is not None:
            fields: Any = self.schema["fields"] if isinstance(self.schema, dict) else []
            in_schema = any(f["name"] == self.batch_id_field for f in fields)
            take = value.get if in_schema else value.pop  # a field of its own is removed
            raw: Any = take(self.batch_id_field, None)
            where = f"field '{self.batch_id_field}'"
        elif self.batch_id_header is not None:
            pairs = headers.items() if isinstance(headers, dict) else headers or []
            found = dict(pairs).get(self.batch_id_header)
            raw = found.decode("ascii", "replace") if isinstance(found, bytes) else found
            where = f"header '{self.batch_id_header}'"
        else:
            return None
        return _checked_batch_id(raw, where)

    def _check_encodes(self, value: dict[str, Any]) -> None:
        """What validates may still not encode (a JSON string with a lone surrogate is no
        UTF-8); encoding it now keeps the failure on this record instead of its batch."""
        try:
            schemaless_writer(io.BytesIO(), self.schema, value)
        except Exception as e:
            raise Rejected("schema", f"does not encode as Avro: {type(e).__name__}: {e}") from e

    def unreadable(self, position: Position, key: bytes | None, payload: bytes | None) -> Event:
        """A rejected record as an event of the lane its key (not its value) points to."""
        return Event(position, key, payload or b"", {}, None, self._lane(position, key, None))

    def _lane(self, position: Position, key: bytes | None, value: dict[str, Any] | None) -> int:
        """The border partition of an event, by `txstream.kafka.routing.partition_of`.

        - With a key field: the one-part key `(value,)`, the field's schema default if it is
          absent, exactly as an OLTP client names the row's key. A null value, or one that
          is no key type, rejects the event: guessing a partition would hide its state from
          every OLTP reader.
        - Without one: the record's Kafka key as a one-part string key, UTF-8 with undecodable
          bytes escaped (PEP 383), so a producer keying by a string lands where OLTP routes
          that string (keys that are ints in OLTP need a key field).
        - With neither (or for a rejected record's bookkeeping): its input partition.
        """
        if self.key_field is not None and value is not None:
            part = value.get(self.key_field, self._key_default)
            if part is None:
                raise Rejected("schema", f"key field '{self.key_field}' is missing or null")
            try:
                return partition_of((part,), self.lanes)
            except (TypeError, ValueError) as e:
                raise Rejected("schema", f"key field '{self.key_field}': {e}") from e
        if key is not None:
            return partition_of((key.decode("utf-8", "surrogateescape"),), self.lanes)
        return position[1] % self.lanes

    @cached_property
    def _key_default(self) -> Any:
        fields: Any = self.schema["fields"] if isinstance(self.schema, dict) else []
        return next((f.get("default") for f in fields if f["name"] == self.key_field), None)


_TOO_DEEP = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"


def _nested_too_deep(value: Any) -> bool:
    """Whether JSON containers nest past MAX_JSON_DEPTH; iterative, since deep input is the
    very thing that would exhaust the stack of a recursive walk (or of repr, or of Avro)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > MAX_JSON_DEPTH:
                return True
            stack.extend((child, depth + 1) for child in item)
    return False


def _checked_batch_id(raw: Any, where: str) -> int:
    """A batch id from a field (any JSON or Avro value) or a header (a string): an integer
    in [1, 2^63), or Rejected saying which way it is not."""
    if raw is None:
        raise Rejected("schema", f"{where}: no batch id")
    batch_id = raw
    if isinstance(raw, str):
        try:
            batch_id = int(raw)
        except ValueError:
            batch_id = None
    if isinstance(batch_id, bool) or not isinstance(batch_id, int):
        raise Rejected("schema", f"{where}: batch id {shown(raw)} is not an integer")
    if not 1 <= batch_id < BATCH_ID_LIMIT:
        raise Rejected("schema", f"{where}: batch id {batch_id} out of range [1, 2^63)")
    return batch_id
