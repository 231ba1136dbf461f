"""The HTTP endpoint: transactions and queries for clients that do not speak Kafka.

  POST /transactions   {"fragments": [{"key": [1], "procedure": "debit", "params": {...}}]}
  GET  /tables/<table>?key=[1]&where=balance<10&isolation=snapshot
  GET  /health

It is a thin gateway over the Python client, so HTTP and Kafka clients take the same path
through the coordinator. Results are JSON; a bad request is a 400 naming what is wrong.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from txstream.client import OltpTimeout, TxClient
from txstream.oltp.messages import Fragment, TxnResult, fragments_from_json, key_of
from txstream.oltp.predicates import parse_condition


def result_json(r: TxnResult) -> dict[str, Any]:
    return {
        "status": r.status,
        "txn_id": r.txn_id,
        "reason": r.reason,
        "detail": r.detail,
        "results": r.values(),
        "rows": [[list(k), row] for k, row in r.table_rows()],
        "partitions": r.partitions,
    }


def fragments_of(body: Any) -> list[Fragment]:
    if not isinstance(body, dict) or "fragments" not in body:
        raise ValueError('body must be {"fragments": [{"key", "procedure", "params"}, ...]}')
    return fragments_from_json(body["fragments"])


class _Handler(BaseHTTPRequestHandler):
    client: TxClient

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/health":
            self._send(HTTPStatus.OK, {"status": "ok"})
            return
        parts = url.path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "tables":
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {url.path}"})
            return
        qs = parse_qs(url.query)

        def query() -> TxnResult:
            key = key_of(qs["key"][0]) if "key" in qs else None
            where = [parse_condition(c) for c in qs.get("where", [])]
            isolation = qs.get("isolation", ["snapshot"])[0]
            return self.client.query(parts[1], key, where, isolation)

        self._serve(query)

    def do_POST(self) -> None:
        if urlparse(self.path).path != "/transactions":
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
            return

        def call() -> TxnResult:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            timeout = float(body.get("timeout_s", self.client.timeout_s))
            return self.client.call(fragments_of(body), timeout)

        self._serve(call)

    def _serve(self, request: Callable[[], TxnResult]) -> None:
        """Run the request; a bad one is a 400 naming what is wrong, no answer a 504."""
        try:
            result = request()
        except (ValueError, AttributeError) as e:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(e)})
            return
        except OltpTimeout as e:
            self._send(HTTPStatus.GATEWAY_TIMEOUT, {"error": str(e)})
            return
        self._answer(result)

    def _answer(self, result: TxnResult) -> None:
        code = HTTPStatus.BAD_REQUEST if result.status == "failed" else HTTPStatus.OK
        self._send(code, result_json(result))

    def _send(self, code: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # the access log would drown the coordinator's own


def serve(client: TxClient, host: str, port: int) -> ThreadingHTTPServer:
    """Serve on host:port in a daemon thread; port 0 picks a free one."""
    handler = type("Handler", (_Handler,), {"client": client})
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
