"""Reads of committed state from the workers that own them, over HTTP, in batches; and
direct transactions sent the same way (`runtime.direct_calls`), answered once committed.

Each read (a point read or read-only fragments) names its partition, computed with the one
routing function; the owner of each partition is found from the app's consumer group
(`kafka.owners`) and asked on its query endpoint (`txstream_worker.queries`). Reads bound
for one worker travel together, a few batches in flight per worker, so many reads cost
few requests. A read the worker no longer owns (a rebalance), or one whose worker cannot be
reached, is sent again to the owner the group then names, until its timeout.

An event loop in a daemon thread does the HTTP; any thread may `submit`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from txstream.config import Settings
from txstream.kafka.owners import WorkerGroup, app_partitions
from txstream.kafka.routing import fragment_partition, partition_of
from txstream.model.declarations import Key
from txstream.oltp.messages import Fragment, TxnResult
from txstream.pending import OltpTimeout, Pending

# Reads per request; and requests per worker whose at-once answers are still awaited (a
# request whose remaining reads wait for a commit no longer counts): one, so reads sent
# meanwhile go together in the next, fewer and larger, requests (docs/benchmarks.md, YCSB).
# Direct transactions go in requests of their own, one per partition until all its answers
# are in (they come once committed): what comes meanwhile goes in the next, so a request
# holds about a group commit's worth; released at once, the requests were a third as
# large and the bank's transfers 30% fewer a second. Per partition, not per worker: a call
# waiting for a 2PC decision holds up only its own partition's, which wait behind it there
# anyway (docs/performance-history.md, TPC-C over the endpoint).
MAX_BATCH = 128
IN_FLIGHT = 1
# While a partition has no owner (a rebalance, workers starting), the group is described
# again this often.
REDESCRIBE_S = 0.2


# Reads refused without running: "failed", as the engines report such transactions.
_REFUSED = frozenset({"unknown_procedure", "bad_request", "bad_read", "wrong_partition", "refused"})


class ReadUnavailable(RuntimeError):
    """No worker answered a read within its timeout; the message says what was seen."""


@dataclass(frozen=True)
class CommittedRow:
    """A row as its partition committed it (None: there is none), and what that state
    reflects: the partition, its inputs' next offsets and its streams' last batch ids."""

    table: str
    key: tuple[Any, ...]
    row: dict[str, Any] | None
    freshness: dict[str, Any]

    @property
    def found(self) -> bool:
        return self.row is not None


@dataclass
class _Read:
    partition: int
    body: dict[str, Any]
    future: Future[Any]
    deadline: float
    then: Callable[[dict[str, Any]], Any]
    unavailable: Callable[[str], BaseException]  # the error once its deadline passes
    why: str = field(default="")  # the last reason it was not answered

    @property
    def lane(self) -> int:
        """Where it queues at its worker: READS, or a direct transaction's partition."""
        return self.partition if "request_id" in self.body else READS


# Where requests queue and are counted in flight: a worker's URL, and READS or the partition
# of the direct transactions they hold.
_Lane = tuple[str, int]
READS = -1


class ReadClient:
    def __init__(self, settings: Settings, app: str) -> None:
        self.settings, self.app = settings, app
        self._count: int | None = None
        self._workers = WorkerGroup(settings, app)
        self._owners: dict[int, str] = {}
        self._described = 0.0
        self._describing: asyncio.Future[None] | None = None
        self._queues: dict[_Lane, list[_Read]] = {}
        self._sending: dict[_Lane, int] = {}
        self._unplaced: list[_Read] = []
        self._posts: dict[asyncio.Future[None], list[_Read]] = {}  # requests in flight
        self._inbox: list[_Read] = []  # submitted, not yet placed: taken by one wake-up
        self._inbox_lock = threading.Lock()
        self._woken = False
        token = settings.http_secret()
        self._headers = {"Content-Type": "application/json"}
        if token is not None:  # direct transactions need it where the stack requires one
            self._headers["Authorization"] = f"Bearer {token}"
        self._loop = asyncio.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="txclient-reads",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def submit(
        self,
        partition: int,
        body: dict[str, Any],
        timeout_s: float,
        then: Callable[[dict[str, Any]], Any],
        future: Future[Any] | None = None,
        unavailable: Callable[[str], BaseException] = ReadUnavailable,
    ) -> Future[Any]:
        """Any thread: ask `body` (`{"table", "key"}`, `{"calls"}`, or a direct transaction)
        of `partition`'s owner; `future` (a new one by default) holds `then(answer)` (an
        error `then` raises), or, past `timeout_s`, `unavailable` of what was seen."""
        future = Future() if future is None else future
        read = _Read(partition, {**body, "partition": partition}, future,
                     time.monotonic() + timeout_s, then, unavailable)  # fmt: skip
        with self._inbox_lock:
            self._inbox.append(read)
            wake, self._woken = not self._woken, True
        if wake:  # one wake-up of the loop for all the reads submitted meanwhile
            self._loop.call_soon_threadsafe(self._take)
        return future

    def row(self, table: str, key: Key | int | str, timeout_s: float) -> Future[CommittedRow]:
        """The committed row of `table` at `key` (`TxClient.read`), or `ValueError` naming
        what the worker refused."""
        k = key if isinstance(key, tuple) else (key,)
        partition = partition_of(k, self._partitions())

        def row(a: dict[str, Any]) -> CommittedRow:
            if not a["ok"]:
                raise ValueError(f"{table} {list(k)}: {a['reason']}: {a['detail']}")
            return CommittedRow(table, k, a["row"], a["freshness"])

        return self.submit(partition, {"table": table, "key": list(k)}, timeout_s, row)

    def call(self, fragments: Sequence[Fragment], timeout_s: float) -> Future[TxnResult]:
        """Read-only fragments on their one partition (`TxClient.submit_read_only`)."""
        parts = {fragment_partition(f.key, self._partitions()) for f in fragments}
        if len(parts) != 1:
            raise ValueError(
                f"a read-only call runs on one partition; these fragments are on {sorted(parts)}"
            )
        partition = parts.pop()
        body = {"calls": [[f.key, f.procedure, f.params] for f in fragments]}
        return self.submit(partition, body, timeout_s, lambda a: read_result(a, partition))

    def direct(
        self, partition: int, request_id: str, fragments: Sequence[Fragment], timeout_s: float
    ) -> Pending:
        """A direct transaction on `partition` (`TxClient` with `direct_via="endpoint"`),
        sent to its owner's endpoint and answered once committed there; sent again, under
        the same id, to whoever owns the partition next if that worker stops answering
        (it runs once). The future holds the result, or `OltpTimeout` if none came in
        `timeout_s` (the outcome is then unknown)."""
        body = {"request_id": request_id,
                "calls": [[f.key, f.procedure, f.params] for f in fragments]}  # fmt: skip

        def result(a: dict[str, Any]) -> TxnResult:
            if "result" in a:
                return TxnResult.from_record(a["result"])
            status = "failed" if a["reason"] in _REFUSED else "aborted"
            return TxnResult(request_id, "", status, a["reason"], a.get("detail", ""),
                             partitions=[partition])  # fmt: skip

        def unknown(why: str) -> OltpTimeout:
            return OltpTimeout(
                f"direct transaction {request_id}: {why}; call again with its request_id to "
                "learn its outcome (it runs once)",
                request_id,
            )

        future = Pending(request_id, partition)
        self.submit(partition, body, timeout_s, result, future, unknown)
        return future

    def _partitions(self) -> int:
        """The app's partition count (its changelog's), which the routing function takes."""
        if self._count is None:
            self._count = app_partitions(self.settings, self.app)
        return self._count

    def close(self) -> None:
        """Stop: reads not answered yet fail with `ReadUnavailable`."""

        async def shut() -> None:
            waiting = [r for batch in self._posts.values() for r in batch]
            waiting += self._unplaced + [r for q in self._queues.values() for r in q]
            tasks = [*self._posts, *([self._describing] if self._describing else [])]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with self._inbox_lock:
                waiting += self._inbox
            for r in waiting:
                if not r.future.done():
                    r.future.set_exception(r.unavailable("the client was closed"))
            if self._session is not None:
                await self._session.close()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    # --- in the loop -----------------------------------------------------------------------

    def _take(self) -> None:
        with self._inbox_lock:
            reads, self._inbox, self._woken = self._inbox, [], False
        for read in reads:
            self._place(read)

    def _place(self, read: _Read) -> None:
        if read.future.cancelled():
            return
        if time.monotonic() >= read.deadline:
            why = read.why or "no answer"
            read.future.set_exception(read.unavailable(
                f"partition {read.partition} of app {self.app!r}: {why} (are its workers "
                "running, with their query endpoint on?)"
            ))  # fmt: skip
            return
        url = self._owners.get(read.partition)
        if url is None:
            read.why = read.why or "no worker holds it in the app's consumer group"
            self._unplaced.append(read)
            self._describe()
            return
        lane = (url, read.lane)
        self._queues.setdefault(lane, []).append(read)
        self._send(lane)

    def _describe(self) -> None:
        """Learn the owners again (one description at a time, at most every
        REDESCRIBE_S), then place the reads that wait for one."""
        if self._describing is not None and not self._describing.done():
            return
        self._describing = asyncio.ensure_future(self._redescribe())

    async def _redescribe(self) -> None:
        wait = self._described + REDESCRIBE_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            found = await self._loop.run_in_executor(None, self._workers.owners)
        except Exception as e:  # the broker is away: keep the old view, say why
            found = self._owners
            for r in self._unplaced:
                r.why = f"the app's consumer group could not be described: {e}"
        self._owners, self._described = found, time.monotonic()
        self._describing = None  # a read placed nowhere below asks for the next one
        waiting, self._unplaced = self._unplaced, []
        for r in waiting:
            self._place(r)

    def _send(self, lane: _Lane) -> None:
        queue = self._queues.get(lane)
        while queue and self._sending.get(lane, 0) < IN_FLIGHT:
            batch, self._queues[lane] = queue[:MAX_BATCH], queue[MAX_BATCH:]
            queue = self._queues[lane]
            self._sending[lane] = self._sending.get(lane, 0) + 1
            post = asyncio.ensure_future(self._post(lane, batch))
            self._posts[post] = batch  # held until done: the loop keeps only weak references
            post.add_done_callback(self._sent)

    def _sent(self, post: asyncio.Future[None]) -> None:
        del self._posts[post]

    async def _post(self, lane: _Lane, batch: list[_Read]) -> None:
        url, writes = lane[0], lane[1] != READS
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        answered: set[int] = set()
        released = False  # counted out of `_sending` once the rest wait for commits
        try:
            body = json.dumps({"requests": [r.body for r in batch]}).encode()
            async with self._session.post(
                f"{url}/v1/requests", data=body, headers=self._headers
            ) as resp:
                if resp.status != 200:
                    raise ReadUnavailable(f"{url} answered HTTP {resp.status}: {await resp.text()}")
                async for line in resp.content:  # each answer as soon as it is ready
                    i, answer = json.loads(line)
                    if i < 0:  # those left wait for a commit: the next batch of reads need not
                        if not released and not writes:
                            released = True
                            self._sending[lane] -= 1
                            self._send(lane)
                        continue
                    answered.add(i)
                    self._answer(url, batch[i], answer)
        except (TimeoutError, aiohttp.ClientError, OSError, ReadUnavailable, ValueError) as e:
            unanswered = [r for i, r in enumerate(batch) if i not in answered]
            if unanswered:
                self._lost(url, unanswered, f"{url}: {e or type(e).__name__}")
            return
        finally:
            if not released:
                self._sending[lane] -= 1
        self._send(lane)

    def _answer(self, url: str, read: _Read, answer: dict[str, Any]) -> None:
        reason = answer.get("reason")
        if reason == "not_owner":
            read.why = answer.get("detail", "not the owner")
            self._forget(url)
            self._place(read)
        elif reason == "timeout":  # its rows waited long for a commit there: ask again
            read.why = answer.get("detail", "the worker's wait ran out")
            self._place(read)
        elif not read.future.cancelled():
            try:
                read.future.set_result(read.then(answer))
            except Exception as e:  # what the answer means, refused: the asker's error
                read.future.set_exception(e)

    def _lost(self, url: str, batch: list[_Read], why: str) -> None:
        """The worker did not answer: ask whoever the group names next."""
        self._forget(url)
        for r in batch:
            r.why = why
            self._place(r)

    def _forget(self, url: str) -> None:
        self._owners = {p: u for p, u in self._owners.items() if u != url}
        for lane in [lane for lane in self._queues if lane[0] == url]:
            self._unplaced += self._queues.pop(lane)
        self._describe()


def read_result(answer: dict[str, Any], partition: int) -> TxnResult:
    """A worker's answer to read-only fragments, as a transaction's result."""
    txn_id = f"read.p{partition}"
    if answer["ok"]:
        return TxnResult("", txn_id, "committed", results=answer["results"],
                         partitions=[partition])  # fmt: skip
    status = "failed" if answer["reason"] in _REFUSED else "aborted"
    return TxnResult("", txn_id, status, answer["reason"], answer.get("detail", ""),
                     partitions=[partition])  # fmt: skip
