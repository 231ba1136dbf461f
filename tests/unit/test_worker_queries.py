"""The worker's query endpoint socket: each connection has Nagle's algorithm off, or a
response written in two parts waits out the client's delayed ACK (40 ms a read)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from txstream_worker.queries import listening_socket


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
