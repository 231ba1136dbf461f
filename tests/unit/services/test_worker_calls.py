"""`POST /v1/requests` on a real uvicorn socket: reads answered at once come first, then
the mark that the rest wait, then each direct transaction's result once its group is
committed (here, by the test standing in for the task's thread). Direct transactions are
refused on `/v1/reads`, and need the stack's bearer token where it has one."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import aiohttp
from pydantic import SecretStr

from tests.unit.services.test_worker_reads_batch import Reader
from txstream.config import Settings
from txstream.engine.committed_reads import CommittedReader
from txstream.oltp.messages import ENDPOINT_REPLY, EngineRequest, TxnResult
from txstream.runtime.direct_calls import TaskCalls
from txstream.runtime.reads import TaskReads
from txstream_worker import queries

CALL = {"partition": 0, "request_id": "r0-a", "calls": [["[1]", "debit", '{"amount": 3}']]}


def endpoint(settings: Settings, reads: TaskReads, calls: TaskCalls) -> queries.QueryEndpoint:
    e = queries.QueryEndpoint(settings, "app", lambda p: reads, "127.0.0.1", 0, lambda p: calls)
    e.start()
    return e


async def post(
    port: int, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, list[Any], str]:
    """The status and the answer lines (or the error body) of one request."""
    async with aiohttp.ClientSession() as session:
        for _ in range(100):  # until uvicorn serves the socket
            try:
                resp = await session.post(f"http://127.0.0.1:{port}{path}",
                                          data=json.dumps(body), headers=headers)  # fmt: skip
                break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
        async with resp:
            if resp.status != 200:
                return resp.status, [], await resp.text()
            return 200, [json.loads(line) async for line in resp.content], ""


def test_a_call_is_answered_once_its_group_commits_after_the_reads_at_hand(
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(queries, "app_partitions", lambda settings, app: 1)
    reads, calls = TaskReads(), TaskCalls()
    reads.serve(cast(CommittedReader, Reader()), (), ())
    e = endpoint(Settings(), reads, calls)
    body = {"requests": [CALL, {"partition": 0, "table": "t", "key": 1}]}

    async def ask() -> tuple[int, list[Any], str]:
        answer = asyncio.ensure_future(post(e.port, "/v1/requests", body))
        while not calls.waiting:  # the endpoint has handed the call to the task
            await asyncio.sleep(0.01)
        ran: list[str] = []

        def apply(r: EngineRequest) -> bool:
            ran.append(r.request_id)
            return True

        calls.run(apply)
        assert ran == ["r0-a"]
        await asyncio.sleep(0.1)
        assert not answer.done(), "no answer before the commit"
        result = TxnResult("r0-a", "P0.r0-a", "committed", results="[7]")
        calls.committed([(ENDPOINT_REPLY, result)])
        return await answer

    with reads.idle():  # the task waits for input: the read is answered at once
        status, lines, _ = asyncio.run(asyncio.wait_for(ask(), 20))
    assert status == 200
    assert [i for i, _ in lines] == [1, -1, 0]
    assert lines[1][1] == {"waiting": 1}
    answer = lines[2][1]
    assert answer["ok"] is True and answer["result"]["results"] == "[7]"
    assert answer["result"]["request_id"] == "r0-a"
    e.server.should_exit = True


def test_reads_path_refuses_a_direct_transaction_naming_where_it_goes(monkeypatch: Any) -> None:
    monkeypatch.setattr(queries, "app_partitions", lambda settings, app: 1)
    e = endpoint(Settings(), TaskReads(), TaskCalls())
    status, _, text = asyncio.run(post(e.port, "/v1/reads", {"reads": [CALL]}))
    assert status == 400 and "/v1/requests" in text
    e.server.should_exit = True


def test_direct_transactions_need_the_bearer_token_the_stack_has(monkeypatch: Any) -> None:
    monkeypatch.setattr(queries, "app_partitions", lambda settings, app: 1)
    calls = TaskCalls("refused here, so the answer comes at once")
    e = endpoint(Settings(http_token=SecretStr("s3cret")), TaskReads(), calls)
    body = {"requests": [CALL]}
    status, _, text = asyncio.run(post(e.port, "/v1/requests", body))
    assert status == 401 and "Bearer" in text
    bad = {"Authorization": "Bearer wrong"}
    assert asyncio.run(post(e.port, "/v1/requests", body, bad))[0] == 401
    good = {"Authorization": "Bearer s3cret"}
    status, lines, _ = asyncio.run(post(e.port, "/v1/requests", body, good))
    assert status == 200 and lines[-1][1]["reason"] == "refused"
    e.server.should_exit = True
