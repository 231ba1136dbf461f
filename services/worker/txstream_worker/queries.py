"""The worker's query endpoint: committed rows and read-only calls, from the partitions it
owns, without a Kafka transaction.

    GET  /v1/tables/{table}/row?key=<JSON>   one row, as its partition has committed it
    POST /v1/reads   {"reads": [{"partition": p, "table": t, "key": [...]}
                                | {"partition": p, "fragments": [...]}, ...]}
                     answered as lines `[i, answer]` (NDJSON), each as soon as it is ready;
                     a call's `results` are its results as JSON text (a string); when some
                     wait for a commit, a line `[-1, {"waiting": n}]` follows the answers
                     ready at once, so a client may send its next batch without waiting
    POST /v1/requests  {"requests": [...]}: the reads above, and direct transactions
                     `{"partition": p, "request_id": id, "calls": [...]}`, each answered
                     once the group that ran it is committed: `{"ok", "result"}`, the
                     result as the client reply topic would have it (`runtime.direct_calls`).
                     Where the stack requires a bearer token, this path requires it too.

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
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future
from typing import Any, cast

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse, StreamingResponse

from txstream.config import Settings
from txstream.engine.committed_reads import Freshness
from txstream.engine.promises import endpoint_call_id
from txstream.kafka.owners import WorkerGroup, app_partitions, endpoint_of, worker_client_id
from txstream.kafka.routing import partition_of
from txstream.oltp.messages import (
    ENDPOINT_REPLY,
    EngineRequest,
    Fragment,
    TxnResult,
    fragments_from_json,
    key_of,
)
from txstream.runtime.direct_calls import CallRefused, TaskCalls
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
        calls_of: Callable[[int], TaskCalls | None] = lambda partition: None,
    ) -> None:
        """`reads_of`, `calls_of`: where a partition's reads and direct transactions go,
        if this worker holds it."""
        self.sock = listening_socket(host, port)
        self.host, self.port = host, int(self.sock.getsockname()[1])
        self.client_id = worker_client_id(host, self.port)
        me = endpoint_of(self.client_id)  # as the group names it to others
        assert me is not None
        api = make_api(settings, app, reads_of, me, calls_of)
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
    settings: Settings,
    app: str,
    reads_of: Callable[[int], TaskReads | None],
    me: str,
    calls_of: Callable[[int], TaskCalls | None] = lambda partition: None,
) -> FastAPI:
    api = FastAPI(title=f"txstream worker queries: {app}", docs_url=None, redoc_url=None)
    owner_of = Owners(settings, app)
    counted: list[int] = []
    token = settings.http_secret()

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
        return await batch(request, "reads", writes=False)

    @api.post("/v1/requests")
    async def requests(request: Request) -> Response:
        if token is not None:
            sent = request.headers.get("authorization", "")
            if not secrets.compare_digest(sent.encode(), f"Bearer {token}".encode()):
                return JSONResponse(
                    {"error": "direct transactions here need Authorization: Bearer <token> "
                              "(the stack's TXSTREAM_HTTP_TOKEN)"},
                    status_code=401, headers={"WWW-Authenticate": "Bearer"},
                )  # fmt: skip
        return await batch(request, "requests", writes=True)

    async def batch(request: Request, field: str, writes: bool) -> Response:
        try:
            body = json.loads(await request.body())
            asked = body[field]
            if not isinstance(asked, list) or len(asked) > MAX_READS:
                raise ValueError(f"{field!r} must be a list of at most {MAX_READS}")
            parsed = [_parse(r, i, writes) for i, r in enumerate(asked)]
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"error": f"bad {field}: {e}"}, status_code=400)
        n = partitions()
        gathered = _Gathered(asyncio.get_running_loop())
        by_partition: dict[int, list[int]] = {}
        ready: list[list[Any]] = []  # [i, answer]: refusals
        now: list[str] = []  # lines ready to go
        later: dict[int, int] = {}  # what waits for a commit: its number -> its partition
        for i, (p, r) in enumerate(parsed):
            wrong = _misplaced(p, r, n)
            if wrong is not None:
                ready.append([i, wrong])
            elif isinstance(r, EngineRequest):
                calls = calls_of(p)
                if calls is None:
                    ready.append([i, await not_owner(p)])
                else:
                    later[i] = p
                    calls.ask(r, gathered.reply_to(i))
            else:
                by_partition.setdefault(p, []).append(i)
        fresh: dict[int, str] = {}
        for p, numbers in by_partition.items():
            futures = ask(p, [cast(ReadRequest, parsed[i][1]) for i in numbers])
            if futures is None:
                ready += [[i, await not_owner(p)] for i in numbers]
                continue
            for i, f in zip(numbers, futures, strict=True):
                if f.done() and f.exception() is None:
                    now.append(answer_line(i, f.result(), fresh))
                else:
                    later[i] = p
                    f.add_done_callback(gathered.read_done(i))
        now += [json.dumps(a, default=str) + "\n" for a in ready]

        async def line(i: int, answer: object) -> str:
            if isinstance(answer, ReadAnswer):
                return answer_line(i, answer, fresh)
            if isinstance(answer, TxnResult):
                return json.dumps([i, {"ok": answer.ok, "result": answer.record()}]) + "\n"
            if isinstance(answer, TaskClosed):  # it moved meanwhile
                out = await not_owner(later[i])
            elif isinstance(answer, CallRefused):
                out = {"ok": False, "reason": "refused", "detail": str(answer)}
            elif isinstance(answer, (ValueError, TypeError, KeyError, RuntimeError)):
                out = {"ok": False, "reason": "bad_request", "detail": str(answer)}
            else:
                raise cast(BaseException, answer)
            return json.dumps([i, out], default=str) + "\n"

        async def lines() -> AsyncIterator[str]:
            """The answers as they come, each line `[i, answer]`: those ready at once in one
            chunk, then those that wait for a commit, as their commits apply."""
            if now:
                yield "".join(now)
            if not later:
                return
            yield f'[-1, {{"waiting": {len(later)}}}]\n'
            left = set(later)
            deadline = time.monotonic() + READ_WAIT_S
            while left:
                try:
                    await asyncio.wait_for(gathered.ready.wait(), deadline - time.monotonic())
                except TimeoutError:
                    detail = f"no answer in {READ_WAIT_S:.0f} s: it waits for a commit here"
                    timeout = {"ok": False, "reason": "timeout", "detail": detail}
                    yield "".join(json.dumps([i, timeout]) + "\n" for i in sorted(left))
                    return
                out = []
                for i, answer in gathered.take():
                    left.discard(i)
                    out.append(await line(i, answer))
                yield "".join(out)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return api


class _Gathered:
    """The answers a batch waits for (reads that wait for a commit, direct transactions),
    given on the tasks' threads and handed to the event loop together: one wake-up of the
    loop for all that came meanwhile, not one per answer."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._got: list[tuple[int, object]] = []
        self._woken = False
        self.ready = asyncio.Event()  # something to `take`

    def reply_to(self, i: int) -> Callable[[object], None]:
        """Any thread: what answers item `i` (a call's result or error)."""
        return lambda answer: self._put(i, answer)

    def read_done(self, i: int) -> Callable[[Future[ReadAnswer]], None]:
        """Any thread: a done callback giving read `i` its answer (or error)."""

        def done(f: Future[ReadAnswer]) -> None:
            error = f.exception()
            self._put(i, f.result() if error is None else error)

        return done

    def _put(self, i: int, answer: object) -> None:
        with self._lock:
            self._got.append((i, answer))
            wake, self._woken = not self._woken, True
        if wake:
            self._loop.call_soon_threadsafe(self.ready.set)

    def take(self) -> list[tuple[int, object]]:
        """The loop: what came since the last take."""
        with self._lock:
            got, self._got, self._woken = self._got, [], False
            self.ready.clear()
        return got


def _misplaced(
    partition: int, r: ReadRequest | EngineRequest, partitions: int
) -> dict[str, Any] | None:
    """An answer for a read or call whose keys are not all on `partition`, else None."""
    if isinstance(r, EngineRequest):
        keys = [key_of(f.key) for f in r.fragments]
    else:
        keys = [key_of(f.key) for f in r.fragments] if r.fragments else [r.key]
    elsewhere = sorted({p for k in keys if (p := partition_of(k, partitions)) != partition})
    if not elsewhere:
        return None
    what = "a direct transaction" if isinstance(r, EngineRequest) else "a read-only call"
    detail = (
        f"asked of partition {partition}, but its keys are on partitions {elsewhere}: "
        f"{what} runs on one partition, the one owning all its keys"
    )
    return {"ok": False, "reason": "wrong_partition", "detail": detail}


def _call(raw: Any, i: int) -> Fragment:
    if not (isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, str) for x in raw)):
        raise ValueError(f"read {i}: each call is [key as JSON, procedure, params as JSON]")
    key_of(raw[0])  # a key that is not one is refused here, naming it
    return Fragment(raw[0], raw[1], raw[2])


def _parse(raw: Any, i: int, writes: bool = False) -> tuple[int, ReadRequest | EngineRequest]:
    if not isinstance(raw, dict) or not isinstance(raw.get("partition"), int):
        raise ValueError(f"request {i} needs an integer 'partition'")
    partition: int = raw["partition"]
    if "request_id" in raw:
        if not writes:
            raise ValueError(f"request {i}: direct transactions go to /v1/requests")
        request_id, calls = raw["request_id"], raw.get("calls")
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request {i}: 'request_id' must be a non-empty string")
        if not isinstance(calls, list) or not calls:
            raise ValueError(f"request {i}: a direct transaction needs a non-empty 'calls'")
        fragments = [_call(c, i) for c in calls]
        txn_id = endpoint_call_id(partition, request_id)
        return partition, EngineRequest(txn_id, 0, "direct", request_id, ENDPOINT_REPLY,
                                        fragments)  # fmt: skip
    if "fragments" in raw:
        return partition, ReadRequest(fragments=fragments_from_json(raw["fragments"]))
    if "calls" in raw:
        return partition, ReadRequest(fragments=[_call(c, i) for c in raw["calls"]])
    if not isinstance(raw.get("table"), str) or "key" not in raw:
        raise ValueError(f"read {i} needs 'fragments', or 'table' and 'key'")
    key = raw["key"] if isinstance(raw["key"], list) else [raw["key"]]
    return partition, ReadRequest(raw["table"], key_of(json.dumps(key)))
