"""Direct transactions a client sends to the worker's endpoint rather than through Kafka.

A call runs on the task's thread between two steps of its delivery loop, in the order the
calls came, in the group at hand, exactly as a direct transaction read from the promises
topic would (`Participant._direct`); its answer goes back to the endpoint once that group
is committed, in Kafka and in RocksDB, never before. Until then nothing of it is durable:
if the worker dies first, the client sends it again, under the same request id, to the
worker that then owns the partition, and the answers each partition keeps
(`engine.direct`) make it run once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from txstream.oltp.messages import ENDPOINT_REPLY, EngineRequest, TxnResult
from txstream.runtime.reads import TaskClosed

# Calls waiting to run at one task; past that a new one is refused as busy.
MAX_WAITING = 10_000
# For this long after a call came, the delivery loop waits for input at most CALL_WAKE_S
# at a time, so that the next call waits no longer to run: Kafka's poll cannot be woken.
ACTIVE_S = 1.0
CALL_WAKE_S = 0.002


class CallRefused(RuntimeError):
    """The task takes no calls (why is the message): the client must use Kafka."""


# How a call is answered: with its committed result, or the error that kept it from one.
Reply = Callable[[TxnResult | BaseException], None]


class TaskCalls:
    def __init__(self, refused: str = "") -> None:
        """`refused`: why this task takes no calls (none: it takes them)."""
        self.refused = refused
        self._lock = threading.Lock()  # guards `_inbox`, `_closed`, `_last`
        self._inbox: deque[tuple[EngineRequest, Reply]] = deque()
        self._new = False  # calls came since `run` last looked
        self._closed = False
        self._last = -ACTIVE_S
        # the task thread's own: request id -> the calls its answer is owed to
        self._answering: dict[str, list[Reply]] = {}

    def ask(self, request: EngineRequest, reply: Reply) -> None:
        """Any thread: run `request` (a direct transaction whose `reply_to` is
        `ENDPOINT_REPLY`); `reply` gets its result once committed (on the task's thread),
        or `TaskClosed` (ask the partition's new owner), `CallRefused`, or a busy error."""
        if request.kind != "direct" or request.reply_to != ENDPOINT_REPLY:
            raise ValueError(
                "a call is a direct transaction answered on the endpoint: not kind "
                f"{request.kind!r}, reply_to {request.reply_to!r}"
            )
        if self.refused:
            reply(CallRefused(self.refused))
            return
        with self._lock:
            problem: BaseException | None = None
            if self._closed:
                problem = TaskClosed("this worker no longer serves the partition")
            elif len(self._inbox) >= MAX_WAITING:
                problem = RuntimeError(f"{MAX_WAITING} calls wait here")
            else:
                self._inbox.append((request, reply))
                self._new = True
                self._last = time.monotonic()
        if problem is not None:
            reply(problem)

    @property
    def waiting(self) -> bool:
        """Calls wait to run."""
        return bool(self._inbox)

    @property
    def new(self) -> bool:
        """Calls came since `run` last looked: the task should not wait for input first.
        (Calls that wait for a decision do not count: the decision comes as input; a task
        that polled without waiting for them spun a core under TPC-C.)"""
        return self._new

    @property
    def recent(self) -> bool:
        """A call came within the last ACTIVE_S: the next may come any moment."""
        return time.monotonic() - self._last < ACTIVE_S

    def run(self, apply: Callable[[EngineRequest], bool]) -> int:
        """The task's thread: `apply` the waiting calls in order, until one must wait
        (`apply` returns False: nothing of it applied); returns how many ran. An `apply`
        that raises refuses its call, with the error, and goes on to the next."""
        ran = 0
        with self._lock:
            self._new = False
        while True:
            with self._lock:
                if not self._inbox:
                    return ran
                request, reply = self._inbox[0]
            try:
                if not apply(request):
                    return ran
            except (ValueError, TypeError, KeyError) as e:
                reply(e)
            else:
                self._answering.setdefault(request.request_id, []).append(reply)
                ran += 1
            with self._lock:
                self._inbox.popleft()

    def committed(self, results: Iterable[tuple[str, TxnResult]]) -> None:
        """The task's thread: the group holding `results` is committed; answer its calls
        (every call of a request id takes the first answer it got)."""
        for reply_to, result in results:
            if reply_to != ENDPOINT_REPLY:
                continue
            for reply in self._answering.pop(result.request_id, ()):
                reply(result)

    def close(self) -> None:
        """The task stops: every call not answered fails, to be sent to the new owner (one
        that ran, uncommitted, runs there; one that committed is answered from what that
        partition kept)."""
        with self._lock:
            self._closed = True
            waiting = [reply for _, reply in self._inbox]
            self._inbox.clear()
        waiting += [reply for replies in self._answering.values() for reply in replies]
        self._answering.clear()
        for reply in waiting:
            reply(TaskClosed("this worker no longer serves the partition"))
