"""The HTTP endpoint: transactions and queries for clients that do not speak Kafka.

  POST /transactions   {"fragments": [{"key": [1], "procedure": "debit", "params": {...}}]}
  GET  /tables/<table>?key=[1]&where=balance<10&isolation=snapshot
  GET  /health
With a token (`TXSTREAM_HTTP_TOKEN`; on a secured stack, one is generated), every route but
/health needs `Authorization: Bearer <token>`; without it the answer is a 401.
  GET  /openapi.json   the OpenAPI document of the above (and /docs to try them)
  GET  /console        a web console over the app (`console`), when the endpoint has one

A FastAPI app over the Python client, so HTTP and Kafka clients take the same path through
the coordinator. Results are JSON; a bad request is a 400 whose `error` names what is
wrong, and no answer in time is a 504.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Annotated, Any, Literal

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from txstream import __version__
from txstream.client import OltpTimeout, TxClient
from txstream.oltp.messages import Fragment, TxnResult, fragments_from_json, key_of
from txstream.oltp.predicates import parse_condition
from txstream_coordinator.console import ConsoleSources, add_console
from txstream_coordinator.http_errors import ErrorOut

KeyPart = int | str
MAX_TIMEOUT_S = 120.0


class FragmentIn(BaseModel):
    """One procedure call, run in the engine that owns `key`."""

    key: list[KeyPart] | KeyPart = Field(description="the partitioning key: a value or a list")
    procedure: str = Field(min_length=1, description="a transaction the app registers")
    params: dict[str, Any] = Field(default_factory=dict)


class TransactionIn(BaseModel):
    fragments: list[FragmentIn] = Field(min_length=1)
    timeout_s: float | None = Field(
        default=None, gt=0, le=MAX_TIMEOUT_S, description="default: the client's"
    )


class ResultOut(BaseModel):
    status: str = Field(description="committed, aborted or failed")
    txn_id: str
    reason: str
    detail: str
    results: list[Any]
    rows: list[list[Any]] = Field(description="[key, row] pairs of a query")
    partitions: list[int]
    at: int | None = Field(
        None,
        description="a snapshot or serializable query: the spanning stream's batch it is as of",
    )


class HealthOut(BaseModel):
    status: Literal["ok"]


def result_json(r: TxnResult) -> dict[str, Any]:
    return {
        "status": r.status,
        "txn_id": r.txn_id,
        "reason": r.reason,
        "detail": r.detail,
        "results": r.values(),
        "rows": [[list(k), row] for k, row in r.table_rows()],
        "partitions": r.partitions,
        "at": r.at,
    }


def fragments_of(body: Any) -> list[Fragment]:
    if not isinstance(body, dict) or "fragments" not in body:
        raise ValueError('body must be {"fragments": [{"key", "procedure", "params"}, ...]}')
    return fragments_from_json(body["fragments"])


ANSWERS: dict[int | str, dict[str, Any]] = {
    400: {"model": ResultOut | ErrorOut, "description": "a bad request, or a failed one"},
    401: {"model": ErrorOut, "description": "no valid bearer token, where one is required"},
    504: {"model": ErrorOut, "description": "no answer from the coordinator in time"},
}


# Module level: FastAPI resolves these annotations (strings here) in the module's globals.
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False))]


def make_app(
    client: TxClient, token: str | None = None, console: ConsoleSources | None = None
) -> FastAPI:
    def authorized(sent: Bearer) -> None:
        if token is None:
            return
        if sent is None or not secrets.compare_digest(sent.credentials.encode(), token.encode()):
            raise HTTPException(
                401,
                "this endpoint needs Authorization: Bearer <token> (the coordinator's "
                "TXSTREAM_HTTP_TOKEN)"
                if sent is None
                else "the bearer token is not valid",
                headers={"WWW-Authenticate": "Bearer"},
            )

    app = FastAPI(
        title="txstream coordinator",
        version=__version__,
        description="OLTP transactions and queries over an app's tables.",
    )

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        sent = request.headers.get("content-type", "")
        if request.method == "POST" and "json" not in sent:
            problems += (
                f" (the body must be JSON, sent as Content-Type: application/json; not {sent!r})"
            )
        return JSONResponse({"error": problems}, status_code=400)

    @app.get("/health", response_model=HealthOut)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    # Declared only with a token, so the document asks for one only where it is needed.
    guarded = [Depends(authorized)] if token is not None else []

    @app.post("/transactions", response_model=ResultOut, responses=ANSWERS, dependencies=guarded)
    def transactions(body: TransactionIn) -> JSONResponse:
        """Run the fragments as one transaction: all commit, or none."""
        timeout = body.timeout_s or client.timeout_s
        return _serve(lambda: client.call(fragments_of(body.model_dump()), timeout))

    @app.get("/tables/{table}", response_model=ResultOut, responses=ANSWERS, dependencies=guarded)
    def tables(
        table: str,
        key: Annotated[str | None, Query(description="a key as JSON, e.g. [1]")] = None,
        where: Annotated[list[str] | None, Query(description="e.g. balance<10")] = None,
        isolation: Literal["snapshot", "read_committed", "serializable"] = "snapshot",
    ) -> JSONResponse:
        """Rows of `table`: the row at `key`, or those matching every `where`."""

        def query() -> TxnResult:
            conditions = [parse_condition(c) for c in where or []]
            return client.query(table, key_of(key) if key else None, conditions, isolation)

        return _serve(query)

    if console is not None:
        add_console(app, console, guarded)
    return app


def _serve(request: Any) -> JSONResponse:
    """Run the request; a bad one is a 400 naming what is wrong, no answer a 504."""
    try:
        result: TxnResult = request()
    except (ValueError, AttributeError) as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    except OltpTimeout as e:
        return JSONResponse({"error": str(e)}, status_code=504)
    code = 400 if result.status == "failed" else 200
    return JSONResponse(result_json(result), status_code=code)


class Gateway:
    """The endpoint served by uvicorn in a daemon thread."""

    def __init__(
        self,
        client: TxClient,
        host: str,
        port: int,
        token: str | None = None,
        console: ConsoleSources | None = None,
    ) -> None:
        config = uvicorn.Config(
            make_app(client, token, console),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="http", daemon=True)

    def start(self, timeout_s: float = 30) -> int:
        """Serve; returns the port (port 0 picks a free one)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP endpoint did not start (is its port taken?)")
            time.sleep(0.01)
        port: int = self.server.servers[0].sockets[0].getsockname()[1]
        return port


def serve(
    client: TxClient,
    host: str,
    port: int,
    token: str | None = None,
    console: ConsoleSources | None = None,
) -> Gateway:
    """Serve on host:port in a daemon thread; port 0 picks a free one. With `token`, the
    transaction, table and console data routes need it as a bearer token."""
    gateway = Gateway(client, host, port, token, console)
    gateway.start()
    return gateway
