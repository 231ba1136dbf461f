"""Avro schemas: the directory registry, the batch envelope and its codec, compatibility."""

from txstream.schemas.codec import Batch, BatchCodec, BatchDecodeError, BatchEncodeError
from txstream.schemas.compatibility import Compatibility, check_compatibility
from txstream.schemas.envelope import ENVELOPE, envelope_schema
from txstream.schemas.registry import (
    SchemaError,
    SchemaFileError,
    SchemaRegistry,
    UnknownSchemaError,
    load_avsc,
    to_avsc,
)
from txstream.schemas.validation import DatumError, find_error

__all__ = [
    "ENVELOPE",
    "Batch",
    "BatchCodec",
    "BatchDecodeError",
    "BatchEncodeError",
    "Compatibility",
    "DatumError",
    "SchemaError",
    "SchemaFileError",
    "SchemaRegistry",
    "UnknownSchemaError",
    "check_compatibility",
    "envelope_schema",
    "find_error",
    "load_avsc",
    "to_avsc",
]
