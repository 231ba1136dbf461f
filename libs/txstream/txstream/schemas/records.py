"""One Avro record to and from bytes, schemaless: the value format of every non-batch topic."""

from __future__ import annotations

from collections.abc import Mapping
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer
from fastavro.types import Schema


def encode_record(schema: Schema, record: Mapping[str, Any]) -> bytes:
    out = BytesIO()
    schemaless_writer(out, schema, record)
    return out.getvalue()


def decode_record(schema: Schema, data: bytes) -> Any:
    return schemaless_reader(BytesIO(data), schema, None)
