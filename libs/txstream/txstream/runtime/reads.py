"""Reads a partition task answers from its committed state, asked from any thread.

A task's state changes only on its own thread, so a read is answered either there, between
two steps of its delivery loop (`answer_waiting`), or at once on the asking thread while
the task waits for input (`idle`): a lock the task holds except while it waits makes the
two exclusive. Either way the read sees the state between groups (`CommittedReader`); one
that must wait (`Conflict`) waits in line and is tried again after each step, or, when it
waits for a write to be committed (`Uncommitted`), after each step that applied a commit:
nothing else can answer it, and trying it on every step cost the worker a fifth of its time
under load (docs/performance-history.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

from txstream.engine.committed_reads import CommittedReader, Conflict, Freshness, Uncommitted
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
        # each with whether it waits for a commit to be applied (`Uncommitted`)
        self._waiting: list[tuple[ReadRequest, Future[ReadAnswer], bool]] = []
        self._applied = False  # a commit applied since the waiting reads were last tried
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
        later = [(r, f, False) for r, f in asked]
        if self._reader is not None and self._state.acquire(blocking=False):
            try:
                later = [(r, f, w) for r, f in asked if (w := self._try(r, f)) is not None]
            finally:
                self._state.release()
        self._at_once.inc(len(asked) - len(later))
        if later:
            with self._line:
                for _, future, _ in later:
                    if self._closed:
                        future.set_exception(TaskClosed("this worker no longer serves it"))
                    elif len(self._waiting) >= MAX_WAITING:
                        future.set_exception(RuntimeError(f"{MAX_WAITING} reads wait here"))
                self._waiting += [entry for entry in later if not entry[1].done()]
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

    def committed(self) -> None:
        """The task's thread: a commit was applied, so reads waiting for one may go on."""
        self._applied = True

    def answer_waiting(self) -> None:
        """The task's thread, between steps: answer what waits, in line, but for the reads
        that must still wait; one that waits for a commit is tried only once one has been
        applied since it was last tried."""
        if not self._waiting or self._reader is None:
            return
        self._fresh = None
        with self._line:
            waiting, self._waiting = self._waiting, []
        committed, self._applied = self._applied, False
        still: list[tuple[ReadRequest, Future[ReadAnswer], bool]] = []
        for r, f, for_commit in waiting:
            if for_commit and not committed:
                still.append((r, f, for_commit))
            elif (waits := self._try(r, f)) is not None:
                still.append((r, f, waits))
        self._waited.inc(len(waiting) - len(still))
        if still:
            with self._line:
                self._waiting[:0] = still

    def close(self) -> None:
        """The task stops: every read still waiting fails, to be asked of the new owner."""
        with self._line:
            self._closed, waiting, self._waiting = True, self._waiting, []
        self._reader = None
        for _, future, _ in waiting:
            if not future.done():
                future.set_exception(TaskClosed("this worker no longer serves the partition"))

    def _freshness(self, reader: CommittedReader) -> Freshness:
        if self._fresh is None:
            self._fresh = reader.freshness(self._topics, self._streams)
        return self._fresh

    def _try(self, request: ReadRequest, future: Future[ReadAnswer]) -> bool | None:
        """Answer `request` into `future` and return None; or, if it must wait, whether it
        waits for a commit to be applied (True) or for something else (False)."""
        if future.cancelled():  # the asker gave up
            return None
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
        except Uncommitted:
            return True
        except Conflict:
            return False
        except ValueError as e:
            answer = ReadAnswer(False, Freshness(reader.ledger.partition), reason="bad_read",
                                detail=str(e))  # fmt: skip
        except Exception as e:  # a read never stops the task: its asker gets the error
            future.set_exception(e)
            return None
        future.set_result(answer)
        return None
