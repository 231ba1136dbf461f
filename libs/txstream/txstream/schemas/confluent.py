"""Confluent's wire format: a zero magic byte, the writer schema's registry id (4 bytes, big
endian), then the Avro body; and the registry calls a reader and a producer need.

Any Confluent-API registry serves (ours is `txstream registry run`). A record whose id the
registry does not know is that record's fault; a registry that does not answer is not, and
is raised as RegistryUnavailable so the caller stops instead of dead-lettering good records.
"""

from __future__ import annotations

import json
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from fastavro import parse_schema
from fastavro.types import Schema

from txstream.schemas.registry import to_avsc

MAGIC = 0
HEADER = struct.Struct(">bI")
MEDIA = "application/vnd.schemaregistry.v1+json"


class RegistryUnavailable(RuntimeError):
    """The schema registry did not answer: no record is at fault."""


class UnknownSchemaId(LookupError):
    """The registry answered that it has no schema with the record's id."""


class NotFramed(ValueError):
    """A value that does not start with the magic byte and a schema id."""


def unframe(data: bytes) -> tuple[int, bytes]:
    """(schema id, Avro body) of a Confluent-framed value."""
    if len(data) < HEADER.size or data[0] != MAGIC:
        raise NotFramed(
            "not in Confluent's wire format (a zero magic byte, then a 4-byte schema id)"
        )
    _, schema_id = HEADER.unpack_from(data)
    return schema_id, data[HEADER.size :]


def frame(schema_id: int, body: bytes) -> bytes:
    return HEADER.pack(MAGIC, schema_id) + body


class RegistryClient:
    """The calls txstream makes of a Confluent-API registry; writer schemas cached by id
    (an id names one schema forever)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._schemas: dict[int, Schema] = {}
        self._lock = threading.Lock()

    def writer_schema(self, schema_id: int) -> Schema:
        with self._lock:
            found = self._schemas.get(schema_id)
        if found is not None:
            return found
        status, doc = self._call("GET", f"/schemas/ids/{schema_id}")
        if status == 404:
            raise UnknownSchemaId(f"schema id {schema_id} is not in the registry at {self.url}")
        schema = parse_schema(json.loads(doc["schema"]))
        with self._lock:
            self._schemas[schema_id] = schema
        return schema

    def register(self, subject: str, schema: Schema) -> int:
        """Register the parsed `schema` under `subject`; its id. A schema the subject's
        compatibility level refuses raises ValueError with the registry's reason."""
        body = {"schema": json.dumps(to_avsc(schema))}
        path = f"/subjects/{urllib.parse.quote(subject, '')}/versions"
        status, doc = self._call("POST", path, body)
        if status != 200:
            raise ValueError(f"the registry at {self.url} refused {subject}: {doc.get('message')}")
        return int(doc["id"])

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", MEDIA)
        req.add_header("Accept", MEDIA)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as e:
            if e.code >= 500:
                raise RegistryUnavailable(f"the registry at {self.url} failed: {e}") from e
            return e.code, json.loads(e.read() or b"{}")
        except (OSError, ValueError) as e:
            raise RegistryUnavailable(f"the registry at {self.url} did not answer: {e}") from e
