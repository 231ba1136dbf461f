"""Can data written under one schema be read with another? Apache Avro's own answer.

Apache Avro's checker implements the specification's resolution rules; its report, though,
gives JSON-pointer locations (`/fields/2/type`) and loses which message belongs to which
location, so the verdict is restated here in terms of field names where that is unambiguous.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import avro.errors
import avro.schema
from avro.compatibility import (
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaCompatibilityType,
    SchemaIncompatibilityType,
)
from fastavro import parse_schema
from fastavro.types import Schema

from txstream.schemas.registry import SchemaError, to_avsc


@dataclass(frozen=True)
class Compatibility:
    """`compatible` is the verdict; `messages` say why not (empty when compatible)."""

    compatible: bool
    messages: tuple[str, ...]


def check_compatibility(reader: Schema, writer: Schema) -> Compatibility:
    """Whether every datum written with `writer` can be read with `reader`.

    Both are fastavro schemas, parsed or self-contained raw JSON.
    """
    reader_avro = _apache(reader, "reader")
    writer_avro = _apache(writer, "writer")
    checker = ReaderWriterCompatibilityChecker()  # type: ignore[no-untyped-call]
    result = checker.get_compatibility(reader_avro, writer_avro)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return Compatibility(True, ())
    return Compatibility(False, _explain(result, reader_avro))


def _apache(schema: Schema, role: str) -> avro.schema.Schema:
    try:
        return avro.schema.parse(json.dumps(to_avsc(parse_schema(schema))))
    except (avro.errors.AvroException, ValueError, TypeError, KeyError) as e:
        raise SchemaError(f"the {role} schema is not valid Avro: {e}") from e


def _explain(result: SchemaCompatibilityResult, reader: avro.schema.Schema) -> tuple[str, ...]:
    kinds = result.incompatibilities
    # Merging with a compatible result adds its default location "/", which locates nothing.
    locations = result.locations - {"/"} or result.locations
    places = sorted(_place(reader, loc) for loc in locations)
    details = sorted(result.messages)
    if len(kinds) == 1 and len(places) == 1 and len(details) == 1:
        return (_sentence(kinds[0], places[0], details[0]),)
    names = ", ".join(sorted({k.value.replace("_", " ") for k in kinds}))
    return (
        f"{len(kinds)} incompatibilities ({names})",
        f"at: {', '.join(places)}",
        f"details: {'; '.join(details)}",
    )


def _sentence(kind: SchemaIncompatibilityType, place: str, detail: str) -> str:
    if kind is SchemaIncompatibilityType.reader_field_missing_default_value:
        return f"{place} is in the reader but not the writer, and has no default to fill it"
    if kind is SchemaIncompatibilityType.type_mismatch:
        return f"{place}: {detail}"
    if kind is SchemaIncompatibilityType.missing_enum_symbols:
        return f"{place}: the reader's enum lacks writer symbols {detail}"
    return f"{place}: {kind.value.replace('_', ' ')}: {detail}"


def _place(reader: avro.schema.Schema, location: str) -> str:
    """A checker location such as `/fields/1/type/items` as `field 'scores[]'`."""
    tokens = [t for t in location.split("/") if t]
    path = ""
    schema: object = reader
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if (
            token == "fields"
            and i + 1 < len(tokens)
            and isinstance(schema, avro.schema.RecordSchema)
        ):
            field = schema.fields[int(tokens[i + 1])]
            path = f"{path}.{field.name}" if path else field.name
            schema = field.type
            i += 2
        elif token == "type":
            i += 1
        elif token == "items" and isinstance(schema, avro.schema.ArraySchema):
            path, schema = f"{path}[]", schema.items
            i += 1
        elif token == "values" and isinstance(schema, avro.schema.MapSchema):
            path, schema = f"{path}{{}}", schema.values
            i += 1
        else:
            suffix = "/".join(tokens[i:])
            return f"field '{path}' ({suffix})" if path else f"the schema ({suffix})"
    return f"field '{path}'" if path else "the top-level schema"
