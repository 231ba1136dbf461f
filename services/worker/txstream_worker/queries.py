"""The worker's query endpoint: committed rows and read-only calls, from the partitions it
owns, without a Kafka transaction.

    GET  /v1/tables/{table}/row?key=<JSON>   one row, as its partition has committed it
    POST /v1/reads   {"reads": [{"partition": p, "table": t, "key": [...]}
                                | {"partition": p, "fragments": [...]}, ...]}
                     answered as lines `[i, answer]` (NDJSON), each as soon as it is ready;
                     a call's `results` are its results as JSON text (a string); when some
                     wait for a commit, a line `[-1, {"waiting": n}]` follows the answers
                     ready at once, so a client may send its next batch without waiting

A read-only call's fragments are `{"key", "procedure", "params"}` objects (as the
coordinator's endpoint takes them), or as `"calls"`, `[key as JSON, procedure, params as
JSON]` strings, which is how `TxClient` sends them.

Each answer names what it reflects (`freshness`: the partition, its inputs' next offsets
and its streams' last batch ids as the last applied commit left them). A row of a partition
another worker owns is redirected there (307), found from the app's consumer group
(`kafka.owners`); in a batch, such a read is answered `not_owner` with the owner, for the
client to ask there. The reads themselves are the tasks' (`runtime.reads`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse

from txstream.config import Settings
from txstream.engine.committed_reads import Freshness
from txstream.kafka.owners import WorkerGroup, app_partitions, endpoint_of, worker_client_id
from txstream.kafka.routing import partition_of
from txstream.oltp.messages import Fragment, fragments_from_json, key_of
from txstream.runtime.reads import ReadAnswer, ReadRequest, TaskClosed, TaskReads

log = logging.getLogger(__name__)

# How long a read may wait for a commit (a row a prepared 2PC transaction holds).
READ_WAIT_S = 10.0
# The app's group is described again at most this often to find other partitions' owners.
OWNERS_TTL_S = 1.0
MAX_READS = 10_000  # per batch request


def freshness_json(f: Freshness) -> dict[str, Any]:
    return {"partition": f.partition, "positions": dict(f.positions), "batches": dict(f.batches)}


def answer_line(i: int, a: ReadAnswer, fresh: dict[int, str]) -> str:
    """Line `[i, answer]` of a batch's answers, written out by hand: a call's results go as
    the JSON text the engine made (never decoded here), and each freshness is encoded once
    (`fresh`, by identity: the task hands one out while its state stands still)."""
    text = fresh.get(id(a.freshness))
    if text is None:
        text = fresh[id(a.freshness)] = json.dumps(freshness_json(a.freshness))
    if not a.ok:
        failed = json.dumps({"ok": False, "reason": a.reason, "detail": a.detail})
        return f'[{i}, {{"freshness": {text}, {failed[1:]}]\n'
    row = json.dumps(a.row, default=str)
    return f'[{i}, {{"ok": true, "freshness": {text}, "row": {row}, ' \
           f'"results": {json.dumps(a.results)}}}]\n'  # fmt: skip


def row_json(a: ReadAnswer) -> dict[str, Any]:
    """A point read's answer, as `GET .../row` has it."""
    out: dict[str, Any] = {"ok": a.ok, "freshness": freshness_json(a.freshness)}
    if a.ok:
        out["row"] = a.row
    else:
        out |= {"reason": a.reason, "detail": a.detail}
    return out


class Owners:
    """The endpoint of each partition's owner, from the group, described at most once per
    `OWNERS_TTL_S`."""

    def __init__(self, settings: Settings, app: str) -> None:
        self.settings, self.app = settings, app
        self._known: dict[int, str] = {}
        self._at = 0.0
        self._lock = threading.Lock()
        self._workers = WorkerGroup(settings, app)

    def of(self, partition: int) -> str | None:
        with self._lock:
            if time.monotonic() - self._at >= OWNERS_TTL_S:
                try:
                    self._known = self._workers.owners()
                except Exception as e:  # the broker is away: the old view, and say why
                    log.warning("could not describe the group of %s: %s", self.app, e)
                self._at = time.monotonic()
            return self._known.get(partition)


class QueryEndpoint:
    """The endpoint, served by uvicorn in a daemon thread on a socket bound at once (so the
    worker can name it in its group before it joins)."""

    def __init__(
        self,
        settings: Settings,
        app: str,
        reads_of: Callable[[int], TaskReads | None],
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.sock = listening_socket(host, port)
        self.host, self.port = host, int(self.sock.getsockname()[1])
        self.client_id = worker_client_id(host, self.port)
        me = endpoint_of(self.client_id)  # as the group names it to others
        assert me is not None
        api = make_api(settings, app, reads_of, me)
        config = uvicorn.Config(api, log_level="warning", lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="queries", daemon=True
        )

    def start(self) -> None:
        self.thread.start()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port. Made with protocol IPPROTO_TCP, which asyncio
    looks for before it turns off Nagle's algorithm on each connection: without it, a
    response written in two parts waits out the client's delayed ACK (40 ms)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def make_api(
    settings: Settings, app: str, reads_of: Callable[[int], TaskReads | None], me: str
) -> FastAPI:
    api = FastAPI(title=f"txstream worker queries: {app}", docs_url=None, redoc_url=None)
    owner_of = Owners(settings, app)
    counted: list[int] = []

    def partitions() -> int:
        if not counted:
            counted.append(app_partitions(settings, app))
        return counted[0]

    async def not_owner(partition: int) -> dict[str, Any]:
        owner = await asyncio.get_running_loop().run_in_executor(None, owner_of.of, partition)
        return {
            "ok": False,
            "reason": "not_owner",
            "detail": f"partition {partition} of {app} is not served here ({me})",
            "owner": None if owner == me else owner,
        }

    def ask(partition: int, requests: Sequence[ReadRequest]) -> list[Future[ReadAnswer]] | None:
        reads = reads_of(partition)
        return None if reads is None else reads.ask(requests)

    async def answer_of(partition: int, future: Future[ReadAnswer]) -> dict[str, Any] | ReadAnswer:
        """The task's answer, or why there is none (a dict, as the wire has it)."""
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), READ_WAIT_S)
        except TimeoutError:
            detail = f"no answer in {READ_WAIT_S:.0f} s: the rows wait for a commit"
            return {"ok": False, "reason": "timeout", "detail": detail}
        except TaskClosed:  # it moved meanwhile
            return await not_owner(partition)

    @api.get("/v1/tables/{table}/row")
    async def row(table: str, key: str, request: Request) -> Response:
        try:
            k = key_of(key if key.lstrip().startswith("[") else f"[{key}]")
        except ValueError as e:
            return JSONResponse({"error": f"key {key!r}: {e}"}, status_code=400)
        partition = partition_of(k, partitions())
        asked = ask(partition, [ReadRequest(table, k)])
        got = await (not_owner(partition) if asked is None else answer_of(partition, asked[0]))
        out = row_json(got) if isinstance(got, ReadAnswer) else got
        if out.get("reason") == "not_owner":
            if out["owner"]:
                return RedirectResponse(out["owner"] + str(request.url.path) + "?"
                                        + str(request.url.query), status_code=307)  # fmt: skip
            return JSONResponse(out, status_code=503, headers={"Retry-After": "1"})
        if not out["ok"]:
            code = {"bad_read": 404, "timeout": 504}.get(out["reason"], 500)
            return JSONResponse(out, status_code=code)
        body = {"table": table, "key": list(k), "found": out["row"] is not None, **out}
        del body["ok"]
        return Response(json.dumps(body, default=str), media_type="application/json")

    @api.post("/v1/reads")
    async def reads(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            asked = body["reads"]
            if not isinstance(asked, list) or len(asked) > MAX_READS:
                raise ValueError(f"'reads' must be a list of at most {MAX_READS}")
            parsed = [_parse(r, i) for i, r in enumerate(asked)]
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"error": f"bad reads: {e}"}, status_code=400)
        n = partitions()
        by_partition: dict[int, list[int]] = {}
        ready: list[list[Any]] = []  # [i, answer]: refusals
        now: list[str] = []  # lines ready to go
        for i, (p, r) in enumerate(parsed):
            wrong = _misplaced(p, r, n)
            if wrong is None:
                by_partition.setdefault(p, []).append(i)
            else:
                ready.append([i, wrong])
        later: list[asyncio.Future[str]] = []
        fresh: dict[int, str] = {}
        for p, numbers in by_partition.items():
            futures = ask(p, [parsed[i][1] for i in numbers])
            if futures is None:
                ready += [[i, await not_owner(p)] for i in numbers]
                continue
            for i, f in zip(numbers, futures, strict=True):
                if f.done() and f.exception() is None:
                    now.append(answer_line(i, f.result(), fresh))
                else:
                    later.append(asyncio.ensure_future(_numbered(i, p, f, answer_of, fresh)))
        now += [json.dumps(a, default=str) + "\n" for a in ready]

        async def lines() -> AsyncIterator[str]:
            """The answers as they come, each line `[i, answer]`: those ready at once in one
            chunk, then each waiting one (for a commit) when it is ready."""
            if now:
                yield "".join(now)
            waiting = set(later)
            if waiting:
                yield f'[-1, {{"waiting": {len(waiting)}}}]\n'
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                yield "".join(d.result() for d in done)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return api


async def _numbered(
    i: int,
    partition: int,
    future: Future[ReadAnswer],
    answer_of: Callable[[int, Future[ReadAnswer]], Awaitable[dict[str, Any] | ReadAnswer]],
    fresh: dict[int, str],
) -> str:
    """The line of read `i`, once it is answered (it waited for a commit)."""
    answer = await answer_of(partition, future)
    if isinstance(answer, ReadAnswer):
        return answer_line(i, answer, fresh)
    return json.dumps([i, answer], default=str) + "\n"


def _misplaced(partition: int, r: ReadRequest, partitions: int) -> dict[str, Any] | None:
    """An answer for a read whose keys are not all on `partition`, else None."""
    keys = [key_of(f.key) for f in r.fragments] if r.fragments else [r.key]
    elsewhere = sorted({p for k in keys if (p := partition_of(k, partitions)) != partition})
    if not elsewhere:
        return None
    detail = (
        f"asked of partition {partition}, but its keys are on partitions {elsewhere}: a "
        "read-only call runs on one partition, the one owning all its keys"
    )
    return {"ok": False, "reason": "wrong_partition", "detail": detail}


def _call(raw: Any, i: int) -> Fragment:
    if not (isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, str) for x in raw)):
        raise ValueError(f"read {i}: each call is [key as JSON, procedure, params as JSON]")
    key_of(raw[0])  # a key that is not one is refused here, naming it
    return Fragment(raw[0], raw[1], raw[2])


def _parse(raw: Any, i: int) -> tuple[int, ReadRequest]:
    if not isinstance(raw, dict) or not isinstance(raw.get("partition"), int):
        raise ValueError(f"read {i} needs an integer 'partition'")
    if "fragments" in raw:
        return raw["partition"], ReadRequest(fragments=fragments_from_json(raw["fragments"]))
    if "calls" in raw:
        return raw["partition"], ReadRequest(fragments=[_call(c, i) for c in raw["calls"]])
    if not isinstance(raw.get("table"), str) or "key" not in raw:
        raise ValueError(f"read {i} needs 'fragments', or 'table' and 'key'")
    key = raw["key"] if isinstance(raw["key"], list) else [raw["key"]]
    return raw["partition"], ReadRequest(raw["table"], key_of(json.dumps(key)))
