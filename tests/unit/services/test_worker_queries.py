"""The worker's query endpoint socket: each connection has Nagle's algorithm off, or a
response written in two parts waits out the client's delayed ACK (40 ms a read)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

import pytest

from txstream.engine.committed_reads import Freshness
from txstream.runtime.reads import ReadAnswer
from txstream_worker.queries import answer_line, listening_socket


def nodelay_of_accepted(sock: socket.socket) -> int:
    """TCP_NODELAY on a connection asyncio accepted from `sock`."""

    async def run() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        host, port = sock.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        try:
            return await asyncio.wait_for(seen, 30)
        finally:
            writer.close()
            server.close()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("make", "nodelay"),
    [
        (lambda: listening_socket("127.0.0.1", 0), True),
        # what the endpoint once used: asyncio leaves Nagle on for it
        (lambda: socket.create_server(("127.0.0.1", 0)), False),
    ],
)
def test_connections_to_the_endpoint_send_at_once(
    make: Callable[[], socket.socket], nodelay: bool
) -> None:
    assert bool(nodelay_of_accepted(make())) is nodelay


def test_an_answer_line_is_json_with_the_results_as_the_engines_text() -> None:
    fresh = Freshness(3, {"app.promises": 7}, {"votes": 2})
    texts: dict[int, str] = {}
    ok = json.loads(answer_line(4, ReadAnswer(True, fresh, results='[{"a": 1}]'), texts))
    assert ok == [
        4,
        {
            "ok": True,
            "freshness": {
                "partition": 3,
                "positions": {"app.promises": 7},
                "batches": {"votes": 2},
            },
            "row": None,
            "results": '[{"a": 1}]',
        },
    ]
    row = json.loads(answer_line(0, ReadAnswer(True, fresh, row={"b": 'x"y'}), texts))
    assert row[1]["row"] == {"b": 'x"y'}
    failed = json.loads(answer_line(1, ReadAnswer(False, fresh, reason="r", detail="d"), texts))
    assert failed == [
        1,
        {"freshness": ok[1]["freshness"], "ok": False, "reason": "r", "detail": "d"},
    ]
    assert len(texts) == 1, "one freshness, encoded once"
