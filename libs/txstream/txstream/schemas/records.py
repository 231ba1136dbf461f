"""One Avro record to and from bytes, schemaless: the value format of every non-batch topic."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.types import Schema

from txstream.schemas.writers import flat_fields, write_record

RecordEncoder = Callable[[Mapping[str, Any]], bytes]


def encode_record(schema: Schema, record: Mapping[str, Any]) -> bytes:
    out = BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


def record_encoder(schema: Schema) -> RecordEncoder:
    """`encode_record` for many records of one parsed schema: a record of scalars by the
    schema's own field writers (`schemas.writers`), and any record they do not take by
    fastavro, which writes it or says why it cannot."""
    fields = flat_fields(schema)
    if fields is None:
        return partial(encode_record, schema)

    def encode(record: Mapping[str, Any]) -> bytes:
        out = bytearray()
        try:
            write_record(out, fields, record)
        except Exception:
            return encode_record(schema, record)
        return bytes(out)

    return encode


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
