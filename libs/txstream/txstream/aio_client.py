"""The client for asyncio code: `await client.call(...)`, `await client.read(...)`.

    async with AsyncTxClient("bank") as client:
        result = await client.call([fragment(1, "debit", account=1, amount=5)])
        row = await client.read("accounts", 1)

Each call is the thread-safe `TxClient`'s send, which never waits for the answer, then an
await of its future, so a coroutine waits without holding the event loop. At most
`max_in_flight` calls are outstanding; one beyond waits for a place (an asyncio semaphore),
never blocking the loop. Opening connects to the broker, in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from txstream.client import MAX_IN_FLIGHT, READ_GRACE_S, TxClient
from txstream.config import Settings
from txstream.model.declarations import Key
from txstream.oltp.messages import Fragment, TxnResult
from txstream.oltp.predicates import Aggregate, Condition
from txstream.read_client import CommittedRow


class AsyncTxClient:
    def __init__(
        self,
        app: str,
        settings: Settings | None = None,
        timeout_s: float = 30.0,
        max_in_flight: int = MAX_IN_FLIGHT,
        **options: Any,
    ) -> None:
        """As `TxClient` takes them; `options` are its other keywords (`direct`, ...)."""
        self._args = (app, settings, timeout_s)
        self._options = {**options, "max_in_flight": max_in_flight}
        self.timeout_s = timeout_s
        self._places = asyncio.Semaphore(max_in_flight)
        self._client: TxClient | None = None

    async def __aenter__(self) -> AsyncTxClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        if self._client is None:
            self._client = await asyncio.to_thread(TxClient, *self._args, **self._options)

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.close)

    @property
    def client(self) -> TxClient:
        """The synchronous client underneath (open first)."""
        if self._client is None:
            raise RuntimeError("the AsyncTxClient is not open: `async with` it, or await open()")
        return self._client

    async def call(
        self,
        fragments: Sequence[Fragment],
        timeout_s: float | None = None,
        request_id: str | None = None,
        read_only: bool = False,
    ) -> TxnResult:
        """`TxClient.call`, awaited."""
        timeout = timeout_s or self.timeout_s
        async with self._places:
            client = self.client
            if read_only:
                future = client.submit_read_only(fragments, timeout)
            else:
                future = client.submit(fragments, timeout_s=timeout, request_id=request_id)
            try:
                return await asyncio.wait_for(asyncio.wrap_future(future), timeout + READ_GRACE_S)
            except TimeoutError as e:
                stopped = await asyncio.to_thread(client.not_running, future)
                raise (stopped or client.unanswered(future, timeout)) from e

    async def read(
        self, table: str, key: Key | int | str, timeout_s: float | None = None
    ) -> CommittedRow:
        """`TxClient.read`, awaited."""
        timeout = timeout_s or self.timeout_s
        async with self._places:
            future = self.client.submit_read(table, key, timeout)
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout + READ_GRACE_S)

    async def query(
        self,
        table: str,
        key: Key | None = None,
        where: Iterable[Condition] = (),
        isolation: str = "snapshot",
        aggregates: Iterable[Aggregate] = (),
        timeout_s: float | None = None,
    ) -> TxnResult:
        """`TxClient.query` (through the coordinator), awaited in a thread."""
        async with self._places:
            return await asyncio.to_thread(
                self.client.query, table, key, where, isolation, aggregates, timeout_s
            )
