"""Reads a partition task answers from its committed state, asked from any thread.

A task's state changes only on its own thread, so a read is answered either there, between
two steps of its delivery loop (`answer_waiting`), or at once on the asking thread while
the task waits for input (`idle`): a lock the task holds except while it waits makes the
two exclusive. Either way the read sees the state between groups (`CommittedReader`); one
that must wait for a commit (`Conflict`) waits in line and is tried again after each step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

from txstream.engine.committed_reads import CommittedReader, Conflict, Freshness
from txstream.engine.fragments import Failed
from txstream.model.declarations import Key, Record
from txstream.observability import metrics
from txstream.oltp.messages import Fragment

# Reads waiting for a commit at one task; past that, a new one is refused as busy.
MAX_WAITING = 10_000


class TaskClosed(RuntimeError):
    """The task stopped serving this partition (moved to another worker, or closed)."""


@dataclass(frozen=True)
class ReadRequest:
    """A point read of `table` at `key`, or read-only `fragments`."""

    table: str = ""
    key: Key = ()
    fragments: Sequence[Fragment] = ()


@dataclass(frozen=True)
class ReadAnswer:
    ok: bool
    freshness: Freshness
    row: Record | None = None  # a point read's row, None when there is none
    results: str = "[]"  # a call's results, as JSON
    reason: str = ""
    detail: str = ""


class TaskReads:
    def __init__(self, app: str = "") -> None:
        self._state = threading.Lock()
        self._state.acquire()  # the task's, released only while it waits for input
        self._line = threading.Lock()  # guards `_waiting`
        self._waiting: list[tuple[ReadRequest, Future[ReadAnswer]]] = []
        self._reader: CommittedReader | None = None
        self._topics: tuple[str, ...] = ()
        self._streams: tuple[str, ...] = ()
        self._closed = False
        self._fresh: Freshness | None = None  # while the state stands still
        self._at_once = metrics.COMMITTED_READS.labels(app, "at_once")
        self._waited = metrics.COMMITTED_READS.labels(app, "after_a_step")

    def serve(self, reader: CommittedReader, topics: Iterable[str], streams: Iterable[str]) -> None:
        """Answer from `reader` from now on (the task is running); freshness names the
        input `topics` and `streams`."""
        self._topics, self._streams = tuple(topics), tuple(streams)
        self._reader = reader

    def ask(self, requests: Sequence[ReadRequest]) -> list[Future[ReadAnswer]]:
        """Any thread: the answers, at once if the task waits for input, else once it gets
        to them."""
        asked = [(r, Future[ReadAnswer]()) for r in requests]
        later = asked
        if self._reader is not None and self._state.acquire(blocking=False):
            try:
                later = [(r, f) for r, f in asked if not self._try(r, f)]
            finally:
                self._state.release()
        self._at_once.inc(len(asked) - len(later))
        if later:
            with self._line:
                for _, future in later:
                    if self._closed:
                        future.set_exception(TaskClosed("this worker no longer serves it"))
                    elif len(self._waiting) >= MAX_WAITING:
                        future.set_exception(RuntimeError(f"{MAX_WAITING} reads wait here"))
                self._waiting += [(r, f) for r, f in later if not f.done()]
        return [f for _, f in asked]

    @contextmanager
    def idle(self) -> Iterator[None]:
        """The task's thread, while it waits for input: reads may be answered meanwhile."""
        self._fresh = None  # the state may have moved since the last read
        self._state.release()
        try:
            yield
        finally:
            self._state.acquire()

    def answer_waiting(self) -> None:
        """The task's thread, between steps: answer what waits, in line, but for the reads
        that must still wait for a commit."""
        if not self._waiting or self._reader is None:
            return
        self._fresh = None
        with self._line:
            waiting, self._waiting = self._waiting, []
        still = [(r, f) for r, f in waiting if not self._try(r, f)]
        self._waited.inc(len(waiting) - len(still))
        if still:
            with self._line:
                self._waiting[:0] = still

    def close(self) -> None:
        """The task stops: every read still waiting fails, to be asked of the new owner."""
        with self._line:
            self._closed, waiting, self._waiting = True, self._waiting, []
        self._reader = None
        for _, future in waiting:
            if not future.done():
                future.set_exception(TaskClosed("this worker no longer serves the partition"))

    def _freshness(self, reader: CommittedReader) -> Freshness:
        if self._fresh is None:
            self._fresh = reader.freshness(self._topics, self._streams)
        return self._fresh

    def _try(self, request: ReadRequest, future: Future[ReadAnswer]) -> bool:
        """Answer `request` into `future`; False if it must wait for a commit."""
        if future.cancelled():  # the asker gave up
            return True
        reader = self._reader
        assert reader is not None
        try:
            if request.fragments:
                outcome = reader.call(request.fragments)
                fresh = self._freshness(reader)
                if isinstance(outcome, Failed):
                    detail = f"{outcome.procedure}: {outcome.detail}"
                    answer = ReadAnswer(False, fresh, reason=outcome.reason, detail=detail)
                else:
                    answer = ReadAnswer(True, fresh, results=outcome)
            else:
                row = reader.row(request.table, request.key)
                answer = ReadAnswer(True, self._freshness(reader), row)
        except Conflict:
            return False
        except ValueError as e:
            answer = ReadAnswer(False, Freshness(reader.ledger.partition), reason="bad_read",
                                detail=str(e))  # fmt: skip
        except Exception as e:  # a read never stops the task: its asker gets the error
            future.set_exception(e)
            return True
        future.set_result(answer)
        return True
