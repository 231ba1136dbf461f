"""The HTTP endpoint's contract over a stand-in client: status codes, bodies, the OpenAPI
document. The real path (coordinator, engines, Kafka) is tested in
tests/integration/test_two_phase.py, with schemathesis against the served document."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from tests.support.http_json import http
from txstream.client import OltpTimeout
from txstream.oltp.messages import Fragment, TxnResult
from txstream_coordinator.gateway import serve


class StandIn:
    """What the gateway uses of TxClient: committed calls, a failing procedure, a timeout."""

    timeout_s = 5.0

    def __init__(self) -> None:
        self.calls: list[tuple[list[Fragment], float]] = []

    def call(self, fragments: Sequence[Fragment], timeout_s: float | None = None) -> TxnResult:
        self.calls.append((list(fragments), timeout_s or self.timeout_s))
        if fragments[0].procedure == "slow":
            raise OltpTimeout("no result within 1s")
        if fragments[0].procedure == "nope":
            return TxnResult("r", "t2", "failed", "unknown_procedure", "no transaction 'nope'")
        return TxnResult("r", "t1", "committed", results="[7]", partitions=[0])

    def query(self, table: str, key: Any, where: Any, isolation: str) -> TxnResult:
        rows = json.dumps([[[1], {"table": table, "isolation": isolation}]])
        at = 12 if isolation == "serializable" else None
        return TxnResult("r", "q1", "committed", rows=rows, partitions=[0], at=at)


@pytest.fixture
def endpoint() -> Iterator[tuple[str, StandIn]]:
    client = StandIn()
    gateway = serve(client, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = gateway.server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", client
    gateway.server.should_exit = True
    gateway.thread.join(10)


def fragments(procedure: str, **extra: Any) -> bytes:
    return json.dumps({"fragments": [{"key": 1, "procedure": procedure}], **extra}).encode()


def test_a_transaction_commits_fails_or_times_out(endpoint: tuple[str, StandIn]) -> None:
    base, client = endpoint
    status, body = http(f"{base}/transactions", fragments("debit", timeout_s=2))
    assert (status, body["status"], body["results"], body["partitions"]) == (
        200, "committed", [7], [0],
    )  # fmt: skip
    assert client.calls[-1][1] == 2
    status, body = http(f"{base}/transactions", fragments("nope"))
    assert (status, body["reason"]) == (400, "unknown_procedure")
    status, body = http(f"{base}/transactions", fragments("slow"))
    assert status == 504 and "no result" in body["error"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"fragments": []}', "fragments: List should have at least 1 item"),
        (b'{"fragments": [{"key": 1}]}', "fragments.0.procedure: Field required"),
        (b'{"fragments": [{"key": 1, "procedure": "p"}], "timeout_s": 9999}', "timeout_s"),
        (b"not json", "JSON decode error"),
    ],
)
def test_a_bad_body_is_a_400_naming_what_is_wrong(
    endpoint: tuple[str, StandIn], body: bytes, says: str
) -> None:
    status, answer = http(f"{endpoint[0]}/transactions", body)
    assert status == 400 and says in answer["error"], answer


def test_a_body_not_sent_as_json_says_so(endpoint: tuple[str, StandIn]) -> None:
    status, answer = http(f"{endpoint[0]}/transactions", fragments("debit"), json_body=False)
    assert status == 400 and "Content-Type: application/json" in answer["error"], answer


def test_queries_health_and_the_openapi_document(endpoint: tuple[str, StandIn]) -> None:
    base, _ = endpoint
    status, body = http(f"{base}/tables/accounts?key=[1]&isolation=read_committed")
    assert (status, body["rows"]) == (
        200,
        [[[1], {"table": "accounts", "isolation": "read_committed"}]],
    )
    assert body["at"] is None
    status, body = http(f"{base}/tables/accounts?isolation=serializable")
    assert (status, body["at"]) == (200, 12)
    status, body = http(f"{base}/tables/accounts?isolation=dirty")
    assert status == 400 and "isolation" in body["error"]
    assert http(f"{base}/health") == (200, {"status": "ok"})
    status, doc = http(f"{base}/openapi.json")
    assert status == 200 and doc["info"]["title"] == "txstream coordinator"
    assert {"/transactions", "/tables/{table}", "/health"} <= set(doc["paths"])
    assert {"400", "504"} <= set(doc["paths"]["/transactions"]["post"]["responses"])


def test_with_a_token_only_health_is_open_without_it() -> None:
    client = StandIn()
    gateway = serve(client, "127.0.0.1", 0, token="s3cret")  # type: ignore[arg-type]
    base = f"http://127.0.0.1:{gateway.server.servers[0].sockets[0].getsockname()[1]}"
    try:
        status, body = http(f"{base}/transactions", fragments("debit"))
        assert status == 401 and "Authorization: Bearer" in body["error"]
        status, body = http(f"{base}/transactions", fragments("debit"), token="guess")
        assert (status, body["error"]) == (401, "the bearer token is not valid")
        assert http(f"{base}/tables/accounts", token="guess")[0] == 401
        assert client.calls == []
        status, body = http(f"{base}/transactions", fragments("debit"), token="s3cret")
        assert (status, body["status"]) == (200, "committed")
        assert http(f"{base}/tables/accounts?key=[1]", token="s3cret")[0] == 200
        assert http(f"{base}/health") == (200, {"status": "ok"})
    finally:
        gateway.server.should_exit = True
        gateway.thread.join(10)
