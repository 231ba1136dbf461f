"""One Avro record to and from bytes, schemaless: the value format of every non-batch topic."""

from __future__ import annotations

from collections.abc import Mapping
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.types import Schema

from txstream.schemas.writers import flat_fields, write_record


def encode_record(schema: Schema, record: Mapping[str, Any]) -> bytes:
    out = BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


class RecordEncoder:
    """`encode_record` for many records of one parsed schema: a record of scalars by the
    schema's own field writers (`schemas.writers`), and any record they do not take by
    fastavro, which writes it or says why it cannot."""

    __slots__ = ("_fields", "_names", "_round_trips", "schema")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._fields = flat_fields(schema)
        self._names = [] if self._fields is None else [name for name, _, _ in self._fields]
        # A 32-bit float does not decode to the double it was written from.
        self._round_trips = self._fields is not None and not _holds_float(schema)

    def __call__(self, record: Mapping[str, Any]) -> bytes:
        return self.encode(record)[0]

    def encode(self, record: Mapping[str, Any]) -> tuple[bytes, bool]:
        """The record's bytes, and whether decoding them gives back a record equal to
        `record` in every field, value type and order: true of a plain dict holding just
        the schema's fields, in its order, each of the exact type its writer takes."""
        fields = self._fields
        if fields is not None:
            out = bytearray()
            try:
                write_record(out, fields, record)
            except Exception:
                pass  # fastavro writes it, or says why it cannot
            else:
                same = self._round_trips and type(record) is dict and list(record) == self._names
                return bytes(out), same
        return encode_record(self.schema, record), False


def _holds_float(schema: Any) -> bool:
    types = [f["type"] for f in schema["fields"]]
    return "float" in types or any(isinstance(t, list) and "float" in t for t in types)


def decode_record(schema: Schema, data: bytes) -> Any:
    return schemaless_reader(BytesIO(data), schema, None)


# Avro types fastavro decodes to values no one can change in place (str, bytes, numbers,
# and the logical types' Decimal, UUID, date and time values).
_SCALARS = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "string", "bytes", "enum", "fixed"}
)


def holds_only_scalars(schema: Schema) -> bool:
    """Whether every field of the record `schema` is a scalar, or a union of scalars: such
    a record, decoded or written as the schema says, is copied whole by a shallow copy."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    return fields is not None and all(_scalar(f["type"]) for f in fields)


def _scalar(avro_type: object) -> bool:
    if isinstance(avro_type, list):
        return all(_scalar(t) for t in avro_type)
    if isinstance(avro_type, dict):
        return avro_type.get("type") in _SCALARS
    return avro_type in _SCALARS
