"""The web console, served by the coordinator's HTTP endpoint beside the OLTP routes.

  GET /console                     the page (its script and style come from here too)
  GET /console/api/overview        the app: tables, streams, partitions, serving or standby
  GET /console/api/graph.svg       the dataflow graph
  GET /console/api/procedures      TEs/s and p50/p99 latency per procedure, batches/s
  GET /console/api/transactions    2PC transactions open at this coordinator
  GET /console/api/dead-letters    the newest records of the app's abort topic
  GET /console/api/tables/<table>  a table's committed rows, from the changelog (`tables`)
With a bearer token
on the endpoint, the API routes need it too; the page is public and takes the token from
its address (`/console#token=...`), so the token never reaches a server log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query
from fastapi.params import Depends
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from txstream.cli.describe import dot
from txstream.config import Settings
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.declarations import RecoveryMode
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream_coordinator.console.sources import (
    Prometheus,
    SourceError,
    commit_figures,
    dead_letters,
    graph_svg,
    open_transactions,
    procedure_figures,
)
from txstream_coordinator.console.tables import TableTail, as_json, ordered
from txstream_coordinator.coordinator import Coordinator
from txstream_coordinator.http_errors import refusals

STATIC = resources.files(__package__) / "static"
MAX_DEAD_LETTERS = 200
MAX_ROWS = 1000
FIRST_READ_WAIT_S = 5.0


@dataclass
class ConsoleSources:
    """What the console reads: the app, where its Kafka and Prometheus are, and the
    coordinator's machine (None while this process stands by)."""

    app: App
    settings: Settings
    partitions: int
    machine: Callable[[], Coordinator | None]

    @property
    def prometheus(self) -> Prometheus:
        s = self.settings
        return Prometheus(f"http://{s.prometheus_host}:{s.prometheus_port}")


def add_console(api: FastAPI, sources: ConsoleSources, guarded: Sequence[Depends]) -> None:
    name = sources.app.name
    decl = sources.app.decl
    graph: list[bytes] = []  # drawn once: a dataflow does not change while it runs
    aborts = AppTopics(name).aborts
    registry = SchemaRegistry(sources.settings.schema_dir)
    abort_schema = registry.get("txstream.AbortRecord")
    changelog = AppTopics(name).changelog
    codec = StateCodec(sources.app.dataflow(), registry)
    tails: dict[str, TableTail] = {}
    tails_lock = threading.Lock()
    api.mount("/console/static", StaticFiles(directory=str(STATIC)), name="console-static")

    @api.get("/console", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text())

    @api.get("/console/api/overview", dependencies=list(guarded), responses=refusals(401))
    def overview() -> dict[str, Any]:
        return {
            "app": name,
            "partitions": sources.partitions,
            "serving": sources.machine() is not None,
            "tables": sorted(decl.tables),
            "recovery": str(sources.app.recovery),
            "streams": sorted(decl.streams),
            "procedures": sorted(decl.procedures),
        }

    @api.get(
        "/console/api/graph.svg",
        dependencies=list(guarded),
        response_class=Response,
        responses={200: {"content": {"image/svg+xml": {}}}, **refusals(401, 503)},
    )
    def graph_image() -> Response:
        if not graph:
            try:
                graph.append(graph_svg(dot(sources.app, sources.partitions)))
            except SourceError as e:
                return JSONResponse({"error": str(e)}, status_code=503)
        return Response(graph[0], media_type="image/svg+xml")

    @api.get("/console/api/procedures", dependencies=list(guarded), responses=refusals(401, 503))
    def procedures() -> Any:
        prom = sources.prometheus
        try:
            return {
                "window": "1m",
                "procedures": procedure_figures(prom, name),
                "commits": commit_figures(prom, name),
            }
        except SourceError as e:
            return JSONResponse({"error": str(e)}, status_code=503)

    @api.get("/console/api/transactions", dependencies=list(guarded), responses=refusals(401))
    def transactions() -> dict[str, Any]:
        machine = sources.machine()
        return {
            "serving": machine is not None,
            "open": open_transactions(machine, time.monotonic()),
        }

    @api.get(
        "/console/api/dead-letters", dependencies=list(guarded), responses=refusals(400, 401, 503)
    )
    def dead_letter_records(
        limit: Annotated[int, Query(ge=1, le=MAX_DEAD_LETTERS)] = 20,
    ) -> Any:
        try:
            records = dead_letters(sources.settings, aborts, abort_schema, limit)
        except SourceError as e:
            return JSONResponse({"error": str(e)}, status_code=503)
        return {"topic": aborts, "records": records}

    @api.get(
        "/console/api/tables/{table}",
        dependencies=list(guarded),
        responses=refusals(400, 401, 404, 503),
    )
    def table_rows(
        table: str,
        sort: Annotated[str | None, Query(description="a column; default: the key")] = None,
        order: Literal["asc", "desc"] = "asc",
        limit: Annotated[int, Query(ge=1, le=MAX_ROWS)] = 100,
    ) -> Any:
        """The table's committed rows, the first `limit` in `order` of `sort`."""
        if table not in decl.tables:
            known = ", ".join(sorted(decl.tables))
            return JSONResponse(
                {"error": f"app {name} has no table named {table!r}; its tables: {known}"}, 404
            )
        if sources.app.recovery is not RecoveryMode.CHANGELOG:
            return JSONResponse(
                {
                    "error": f"app {name} recovers from its command log "
                    f"(recovery={sources.app.recovery}), so no changelog holds its tables; "
                    "query them with GET /tables/<table>"
                },
                503,
            )
        with tails_lock:
            tail = tails.get(table)
            if tail is None:
                tail = tails[table] = TableTail(sources.settings, changelog, codec, table)
        tail.caught_up.wait(FIRST_READ_WAIT_S)
        if tail.error is not None:
            return JSONResponse({"error": tail.error}, 503)
        rows = tail.rows()
        return {
            "table": table,
            "source": changelog,
            "caught_up": tail.caught_up.is_set(),
            "total": len(rows),
            "rows": as_json(ordered(rows, sort, order == "desc", limit)),
        }
