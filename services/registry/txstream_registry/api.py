"""The Confluent Schema Registry REST API (the part serializers and users call), for Avro.

  GET  /subjects                                 subjects with a version
  GET  /subjects/{s}/versions                    their version numbers
  GET  /subjects/{s}/versions/{v}                {subject, version, id, schema}; v: n or latest
  GET  /subjects/{s}/versions/{v}/schema         the schema itself
  POST /subjects/{s}/versions                    register {"schema": "..."} -> {"id": n}
  POST /subjects/{s}                             look a schema up in a subject
  GET  /schemas/ids/{id}                         {"schema": "..."}
  GET  /schemas/ids/{id}/versions                [{subject, version}]
  POST /compatibility/subjects/{s}/versions/{v}  {"is_compatible": bool, "messages": [...]}
  GET|PUT /config, /config/{s}                   the compatibility level (default BACKWARD)
Errors are Confluent's: {"error_code": n, "message": "..."} with its HTTP status. Deleting
subjects and versions, schema references and schema types other than Avro are not offered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from txstream import __version__
from txstream_registry import metrics
from txstream_registry.log import Fenced, SchemaLog
from txstream_registry.state import (
    Parsed,
    RegistryError,
    RegistryState,
    parse,
    subject_not_found,
)

MEDIA = "application/vnd.schemaregistry.v1+json"


class SchemaIn(BaseModel):
    schema_: str = Field(alias="schema", description="the Avro schema, as JSON text")
    schemaType: str | None = None  # Confluent's field name
    references: list[Any] | None = None


class LevelIn(BaseModel):
    compatibility: str


class Registry:
    """The state behind a lock, and the log every write goes to first."""

    def __init__(self, log: SchemaLog, on_fenced: Callable[[], None]) -> None:
        self.log = log
        self.state = RegistryState()
        for record in log.replay():
            self.state.apply(record)
        metrics.SCHEMAS.set(len(self.state.schemas))
        self.lock = threading.Lock()
        self.on_fenced = on_fenced

    def write(self, record: dict[str, Any]) -> None:
        try:
            self.log.append(record)
        except Fenced:
            self.on_fenced()
            raise RegistryError(
                503, 50003, "this registry was replaced by another; retry"
            ) from None
        except Exception as e:
            raise RegistryError(500, 50001, f"Error in the backend data store: {e}") from e
        self.state.apply(record)
        metrics.SCHEMAS.set(len(self.state.schemas))
        if record["kind"] == "schema":
            metrics.REGISTERED.inc()


def make_api(registry: Registry) -> FastAPI:
    api = FastAPI(title="txstream schema registry", version=__version__,
                  description="The Confluent Schema Registry API, for Avro schemas.")  # fmt: skip
    state, lock = registry.state, registry.lock

    @api.exception_handler(RegistryError)
    async def refused(request: Request, e: RegistryError) -> JSONResponse:
        metrics.REFUSED.labels(str(e.code)).inc()
        return _answer({"error_code": e.code, "message": e.message}, e.status)

    @api.exception_handler(RequestValidationError)
    async def unreadable(request: Request, e: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}" for p in e.errors())
        return _answer({"error_code": 422, "message": f"Unprocessable entity: {problems}"}, 422)

    @api.get("/")
    def root() -> JSONResponse:
        return _answer({})

    @api.get("/subjects")
    def subjects() -> JSONResponse:
        with lock:
            return _answer(sorted(s for s, v in state.subjects.items() if v))

    @api.get("/subjects/{subject}/versions")
    def versions(subject: str) -> JSONResponse:
        with lock:
            return _answer(list(range(1, len(state.versions(subject)) + 1)))

    @api.get("/subjects/{subject}/versions/{version}")
    def version(subject: str, version: str) -> JSONResponse:
        with lock:
            n, schema_id = state.version(subject, version)
            return _answer(_registered(subject, n, schema_id, state.schema(schema_id)))

    @api.get("/subjects/{subject}/versions/{version}/schema")
    def version_schema(subject: str, version: str) -> JSONResponse:
        with lock:
            _, schema_id = state.version(subject, version)
            return _answer(json.loads(state.schema(schema_id).text))

    @api.post("/subjects/{subject}/versions")
    def register(subject: str, body: SchemaIn) -> JSONResponse:
        parsed = parse(body.schema_, body.schemaType, body.references)
        with lock:
            schema_id, record = state.plan_register(subject, parsed)
            if record is not None:
                registry.write(record)
            n, _ = state.lookup(subject, parsed)
            return _answer(_registered(subject, n, schema_id, parsed))

    @api.post("/subjects/{subject}")
    def lookup(subject: str, body: SchemaIn) -> JSONResponse:
        parsed = parse(body.schema_, body.schemaType, body.references)
        with lock:
            n, schema_id = state.lookup(subject, parsed)
            return _answer(_registered(subject, n, schema_id, state.schema(schema_id)))

    @api.get("/schemas/ids/{schema_id}")
    def by_id(schema_id: int) -> JSONResponse:
        with lock:
            return _answer({"schema": state.schema(schema_id).text})

    @api.get("/schemas/ids/{schema_id}/versions")
    def id_versions(schema_id: int) -> JSONResponse:
        with lock:
            state.schema(schema_id)
            found = [{"subject": s, "version": n}
                     for s, ids in sorted(state.subjects.items())
                     for n, i in enumerate(ids, start=1) if i == schema_id]  # fmt: skip
            return _answer(found)

    @api.post("/compatibility/subjects/{subject}/versions/{version}")
    def compatibility(subject: str, version: str, body: SchemaIn) -> JSONResponse:
        parsed = parse(body.schema_, body.schemaType, body.references)
        with lock:
            if subject not in state.subjects:
                raise subject_not_found(subject)
            if version in ("latest", "-1"):
                against = state.versions(subject)
            else:
                against = [state.version(subject, version)[1]]
            problems = state.incompatibilities(subject, parsed, against)
            return _answer({"is_compatible": not problems, "messages": problems})

    @api.get("/config")
    def global_level() -> JSONResponse:
        with lock:
            return _answer({"compatibilityLevel": state.level("")})

    @api.put("/config")
    def set_global_level(body: LevelIn) -> JSONResponse:
        return _set_level("", body.compatibility)

    @api.get("/config/{subject}")
    def subject_level(subject: str) -> JSONResponse:
        with lock:
            return _answer({"compatibilityLevel": state.level(subject)})

    @api.put("/config/{subject}")
    def set_subject_level(subject: str, body: LevelIn) -> JSONResponse:
        return _set_level(subject, body.compatibility)

    def _set_level(subject: str, level: str) -> JSONResponse:
        with lock:
            registry.write(state.plan_level(subject, level.upper()))
            return _answer({"compatibility": level.upper()})

    return api


def _registered(subject: str, version: int, schema_id: int, parsed: Parsed) -> dict[str, Any]:
    return {"subject": subject, "version": version, "id": schema_id, "schema": parsed.text}


def _answer(doc: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(doc, status_code=status, media_type=MEDIA)
