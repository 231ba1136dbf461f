"""Raw user events: decoded, checked against the stream's schema, given a batch id and a lane.

Users produce one event per record with any client: JSON (what kcat and most services send)
or schemaless Avro of the stream's tuple schema. An event that cannot be read, or that does
not fit the schema, is not an error of the sequencer: it becomes a dead letter with the reason.
"""

from __future__ import annotations

import io
import json
import zlib
from dataclasses import dataclass
from typing import Any

from fastavro import schemaless_reader
from fastavro.types import Schema

from txstream.schemas.validation import find_error

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
    fmt: str  # "json" or "avro"
    lanes: int  # partitions of the border topic
    batch_id_field: str | None = None
    batch_id_header: str | None = None
    key_field: str | None = None

    def read(
        self,
        position: Position,
        key: bytes | None,
        payload: bytes | None,
        headers: Headers,
    ) -> Event:
        data = payload or b""
        value = self._decode(data)
        batch_id = self._batch_id(value, headers)
        error = find_error(value, self.schema)
        if error is not None:
            raise Rejected("schema", str(error))
        return Event(position, key, data, value, batch_id, self._lane(position, key, value))

    def _decode(self, data: bytes) -> dict[str, Any]:
        if self.fmt == "avro":
            try:
                record = schemaless_reader(io.BytesIO(data), self.schema, None)
            except Exception as e:  # fastavro raises many types for garbage input
                raise Rejected("undecodable", f"not Avro of the stream's schema: {e}") from e
        else:
            try:
                record = json.loads(data)
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise Rejected("undecodable", f"not JSON: {e}") from e
        if not isinstance(record, dict):
            raise Rejected("undecodable", f"expected a JSON object, got {type(record).__name__}")
        return record

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
        try:
            batch_id = int(raw)
        except (TypeError, ValueError):
            raise Rejected("schema", f"{where}: expected a batch id, got {raw!r}") from None
        if isinstance(raw, bool) or batch_id < 1:
            raise Rejected("schema", f"{where}: batch ids are integers from 1, got {raw!r}")
        return batch_id

    def unreadable(self, position: Position, key: bytes | None, payload: bytes | None) -> Event:
        """A rejected record as an event of the lane its key (not its value) points to."""
        return Event(position, key, payload or b"", {}, None, self._lane(position, key, None))

    def _lane(self, position: Position, key: bytes | None, value: dict[str, Any] | None) -> int:
        if self.key_field is not None and value is not None:
            key = str(value.get(self.key_field)).encode()
        if key is None:
            return position[1] % self.lanes
        return zlib.crc32(key) % self.lanes
