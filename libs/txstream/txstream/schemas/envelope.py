"""The atomic-batch envelope (DESIGN 3.1), specialised per stream.

The envelope's `tuples` items are the stream's own tuple record rather than opaque bytes, so a
whole batch is one schemaless Avro write and Spark decodes it with one schema. The template is
`schemas/txstream.BatchEnvelope.avsc` in the project root, a platform schema that stays there
whichever directory holds the user's schemas.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from fastavro import parse_schema
from fastavro.schema import SchemaParseException, UnknownType
from fastavro.types import NamedSchemas, Schema

from txstream.config import default_schema_dir
from txstream.schemas.registry import SchemaError, read_avsc

ENVELOPE = "txstream.BatchEnvelope"


@functools.cache
def envelope_template() -> dict[str, Any]:
    """The envelope as written in its `.avsc`, with the placeholder tuple record."""
    template: dict[str, Any] = read_avsc(default_schema_dir() / f"{ENVELOPE}.avsc")
    return template


def envelope_schema(tuple_schema: Schema) -> dict[str, Any]:
    """The parsed envelope whose `tuples` are records of `tuple_schema` (parsed or raw JSON)."""
    named: NamedSchemas = {}
    try:
        parsed = parse_schema(tuple_schema, named)
    except (SchemaParseException, UnknownType, KeyError, TypeError, ValueError) as e:
        raise SchemaError(f"invalid tuple schema: {e}") from e
    if not isinstance(parsed, dict) or parsed["type"] != "record":
        raise SchemaError(f"a stream's tuple schema must be a record, not {tuple_schema!r}")
    item = {k: v for k, v in parsed.items() if not k.startswith("__")}
    if "." not in item["name"]:
        # Keep a null-namespace tuple record out of the envelope's `txstream` namespace.
        item["namespace"] = ""
    template = envelope_template()
    fields = [
        {**f, "type": {**f["type"], "items": item}} if f["name"] == "tuples" else f
        for f in template["fields"]
    ]
    return cast(dict[str, Any], parse_schema({**template, "fields": fields}, named))
