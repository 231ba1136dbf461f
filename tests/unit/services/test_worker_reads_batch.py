"""`POST /v1/reads` on a real uvicorn socket: the answers ready at once come first, then a
line `[-1, {"waiting": n}]` saying n more wait for a commit (a client sends its next batch
on it), then each waiting answer once its commit applies."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import aiohttp
import pytest

from txstream.config import Settings
from txstream.engine.committed_reads import CommittedReader, Freshness, Uncommitted
from txstream.model.declarations import Key, Record
from txstream.runtime.reads import TaskReads
from txstream_worker import queries


class Reader:
    """Row `key` of any table; key 2 waits for a commit until `applied`."""

    def __init__(self) -> None:
        self.applied = False

    def row(self, table: str, key: Key) -> Record | None:
        if key == (2,) and not self.applied:
            raise Uncommitted("row [2] has a write not yet committed")
        return {"k": key[0]}

    def freshness(self, topics: Any, streams: Any) -> Freshness:
        return Freshness(0)


def test_answers_ready_at_once_then_the_waiting_mark_then_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(queries, "app_partitions", lambda settings, app: 1)
    reader = Reader()
    reads = TaskReads()
    reads.serve(cast(CommittedReader, reader), (), ())
    endpoint = queries.QueryEndpoint(Settings(), "app", lambda p: reads, "127.0.0.1", 0)
    endpoint.start()
    body = {"reads": [{"partition": 0, "table": "t", "key": k} for k in (1, 2, 3)]}

    async def ask() -> list[Any]:
        lines: list[Any] = []
        async with aiohttp.ClientSession() as session:
            for _ in range(100):  # until uvicorn serves the socket
                try:
                    resp = await session.post(
                        f"http://127.0.0.1:{endpoint.port}/v1/reads", data=json.dumps(body)
                    )
                    break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            async with resp:
                assert resp.status == 200
                async for line in resp.content:
                    lines.append(json.loads(line))
                    if lines[-1][0] == -1:  # the task's next step applies a commit
                        waiting_for_input.__exit__(None, None, None)
                        reader.applied = True
                        reads.committed()
                        reads.answer_waiting()
        return lines

    # the task waits for input: reads are answered at once, on the asking thread
    waiting_for_input = reads.idle()
    waiting_for_input.__enter__()
    lines = asyncio.run(asyncio.wait_for(ask(), 20))
    assert [i for i, _ in lines] == [0, 2, -1, 1]
    assert lines[2][1] == {"waiting": 1}
    assert lines[3][1]["row"] == {"k": 2}
    endpoint.server.should_exit = True
