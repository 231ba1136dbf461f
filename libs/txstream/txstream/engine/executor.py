"""The TE executor: runs a batch's procedures, one transaction execution at a time.

For a batch it runs the consuming procedures in graph order; a committed TE's outputs fire
the downstream procedures in-process (PE triggers). A nested transaction runs its members
for the batch inside one shared write set, so nothing interleaves and it commits only if
every member commits. Effects go into the ledger's group.

Recovery's strong replay turns PE triggers off (`triggers`): committed outputs then wait in
`pending`, by (stream, batch id), for the logged TEs that consume them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, final

from txstream.engine import formulas
from txstream.engine.context import TeContext
from txstream.engine.group import (
    AbortRecord,
    Journal,
    JournalEntry,
    OutputBatch,
    RecordCheck,
    Source,
)
from txstream.engine.history import History
from txstream.engine.hops import hop_batches
from txstream.engine.ledger import BatchLedger
from txstream.engine.spanning import Owner, Span, keep_local
from txstream.engine.writeset import WriteSet
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import NestedTransaction, Procedure, Record
from txstream.model.errors import StateUnavailable, TxnAbort, exception_detail


@final
class _Scope:
    """An open nested transaction: its outputs and the triggers it must fire after commit.
    (Not a dataclass: one is made per nested transaction, and mypyc makes a class with its
    own `__init__` several times faster.)"""

    def __init__(self, nested: NestedTransaction, span: Span | None) -> None:
        self.nested = nested
        self.outputs: list[OutputBatch] = []
        self.deferred: list[tuple[Procedure, str, Sequence[Record]]] = []
        self.span = span  # a spanning nested transaction's, which every member reads by


class _NestedAbort(Exception):
    def __init__(self, procedure: str, reason: str, error: str) -> None:
        super().__init__(reason)
        self.procedure = procedure
        self.reason = reason
        self.error = error


@final
class TeExecutor:
    def __init__(
        self,
        dataflow: Dataflow,
        ledger: BatchLedger,
        params: Any,
        owner: Owner,
        journal: Journal = Journal.NONE,
        timer: Callable[[str, float], None] | None = None,
        record_check: RecordCheck | None = None,
        flat_tables: frozenset[str] = frozenset(),
    ) -> None:
        self.dataflow = dataflow
        self.ledger = ledger
        self.params = params
        self.owner = owner
        self.journal = journal
        self.timer = timer
        self.record_check = record_check
        self.flat_tables = flat_tables
        self.hops = tuple(dataflow.decl.procedures[p] for p in dataflow.hops)
        self.triggers = True
        self._journal_kept = journal
        self.pending: dict[tuple[str, int], Sequence[Record]] = {}
        self.history: History | None = None  # the spanning stream's (`keep_history`)
        self._source: tuple[str, str, int] | None = None  # (stream, topic, offset) in hand

    def keep_history(self, history: History) -> None:
        """Record what spanning batches' writes overwrite, for serializable reads."""
        self.history = history

    def run_border(
        self, stream: str, batch_id: int, tuples: Sequence[Record], source: Source | None
    ) -> None:
        """Run every procedure reachable from border `stream` on this batch, read at
        `source`, into the group."""
        self._source = None if source is None else (stream, source[0], source[2])
        try:
            if self.journal is Journal.BORDER:
                self.ledger.group.journal.append(self._entry(stream, batch_id, None))
            self._deliver(self.ledger.group.ws, stream, batch_id, tuples, None)
        finally:
            self._source = None

    def run(self, proc: Procedure, stream: str, batch_id: int, tuples: Sequence[Record]) -> None:
        """Run `proc` on a batch of `stream` into the group, outside any nested transaction."""
        self._dispatch(self.ledger.group.ws, proc, stream, batch_id, tuples)

    def merge(self, ws: WriteSet, parent: WriteSet | None = None) -> None:
        """Merge a finished write set into `parent` (the group's by default), keeping what
        it overwrites in the group for serializable reads (`History`)."""
        group_ws = self.ledger.group.ws
        if parent is None:
            parent = group_ws
        if ws.formulas:  # recomputed from the group's rows now (`engine.formulas`)
            if parent is group_ws:
                formulas.rebase(ws, parent, self.ledger.base)
            else:
                formulas.carry(ws, parent)
        history = self.history
        if history is not None and history.recording and parent is group_ws:
            history.record(ws, parent, self.ledger.base)
        ws.merge_into(parent)

    def run_span(
        self, proc: Procedure, batch_id: int, tuples: Sequence[Record], span: Span
    ) -> None:
        """A spanning batch here: one TE, or the whole nested transaction `proc` roots. One
        reading as of its epoch's start runs over a write set of its own, not the group's
        (which holds its epoch's earlier batches), merged into the group once it is done."""
        nested = self.dataflow.nested_of.get(proc.name)
        if self.history is not None:
            self.history.running = batch_id  # its writes are batch `batch_id`'s side of a cut
        parent = WriteSet() if span.epoch else self.ledger.group.ws
        try:
            if nested is None:
                self._run_te(parent, proc, proc.input, batch_id, tuples, None, span)
            else:
                self._run_nested(parent, nested, proc, proc.input, batch_id, tuples, span)
            if span.epoch:
                self.merge(parent)
        finally:
            if self.history is not None:
                self.history.running = None

    def begin_replay(self, strong: bool) -> None:
        """Replaying a command log: nothing is journaled again, and a strong replay turns
        PE triggers off (each consuming TE is in the log itself)."""
        self._journal_kept, self.journal, self.triggers = self.journal, Journal.NONE, not strong

    def end_replay(self) -> None:
        self.journal, self.triggers = self._journal_kept, True

    def pending_batch(self, stream: str, batch_id: int) -> Sequence[Record] | None:
        """A committed output batch waiting (triggers off) for its logged consumers."""
        return self.pending.get((stream, batch_id))

    def forget_consumed(self, done: set[tuple[str, str, int]]) -> None:
        """Drop pending batches every consumer has replayed (`done`: (procedure, stream,
        batch id)), so memory stays bounded."""
        for stream, batch_id in list(self.pending):
            names = [(p.name, stream, batch_id) for p in self.dataflow.consumers.get(stream, ())]
            if all(n in done for n in names):
                del self.pending[(stream, batch_id)]
                done.difference_update(names)

    def fire_pending(self, done: set[tuple[str, str, int]]) -> None:
        """Triggers back on: run each pending batch's consumers that `done` does not list."""
        pending, self.pending = self.pending, {}
        for (stream, batch_id), tuples in pending.items():
            for proc in self.dataflow.consumers.get(stream, ()):
                if (proc.name, stream, batch_id) not in done:
                    self.run(proc, stream, batch_id, tuples)

    def _entry(self, stream: str, batch_id: int, procedure: str | None) -> JournalEntry:
        """A journal entry; it locates its input if that is the border batch in hand."""
        if self._source is None or self._source[0] != stream:
            return JournalEntry(stream, batch_id, procedure)
        return JournalEntry(stream, batch_id, procedure, self._source[1], self._source[2])

    def _deliver(
        self,
        parent: WriteSet,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        scope: _Scope | None,
    ) -> None:
        if scope is None and not self.triggers:
            self.pending[(stream, batch_id)] = tuples
            return
        for proc in self.dataflow.consumers.get(stream, ()):
            if proc.partition_by is not None:
                continue  # its part of the batch was routed with the producing TE's outputs
            nested = self.dataflow.nested_of.get(proc.name)
            if scope is None:
                self._dispatch(parent, proc, stream, batch_id, tuples)
            elif nested is None or nested.name != scope.nested.name:
                scope.deferred.append((proc, stream, tuples))
            else:
                self._run_te(parent, proc, stream, batch_id, tuples, scope)

    def _dispatch(
        self,
        parent: WriteSet,
        proc: Procedure,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
    ) -> None:
        """Run `proc` outside any open nested transaction: alone, or opening its own."""
        entry = None
        if self.journal is Journal.ALL:
            entry = self._entry(stream, batch_id, proc.name)
            self.ledger.group.journal.append(entry)
        nested = self.dataflow.nested_of.get(proc.name)
        if nested is not None:
            committed = self._run_nested(parent, nested, proc, stream, batch_id, tuples)
        else:
            committed = self._run_te(parent, proc, stream, batch_id, tuples, None)
        if entry is not None:
            entry.aborted = not committed

    def _run_nested(
        self,
        parent: WriteSet,
        nested: NestedTransaction,
        proc: Procedure,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        span: Span | None = None,
    ) -> bool:
        """Run a nested transaction; a spanning one (`span`) keeps only this engine's
        writes, once every member has run (a later member reads an earlier one's writes to
        any key), and only its leader emits and records aborts."""
        scope = _Scope(nested, span)
        nws = WriteSet(parent)
        speaks = span is None or span.leader
        group = self.ledger.group
        try:
            self._run_te(nws, proc, stream, batch_id, tuples, scope)
            if self.record_check is not None:
                scope.outputs = self.record_check(nws, scope.outputs)
            if span is not None:
                keep_local(nws, span.plan, span.me)
                scope.outputs = scope.outputs if span.leader else []
        except _NestedAbort as a:
            if speaks:
                group.aborts.append(AbortRecord(
                    f"{nested.name}/{a.procedure}", stream, batch_id, a.reason, a.error
                ))  # fmt: skip
            return False
        except TxnAbort as e:  # checked as a whole: no one member is to blame
            if speaks:
                group.aborts.append(AbortRecord(nested.name, stream, batch_id, e.reason, str(e)))
            return False
        self.merge(nws, parent)
        group.outputs.extend(scope.outputs)
        for p, s, tups in scope.deferred:
            if self.triggers:
                self._dispatch(parent, p, s, batch_id, tups)
            else:
                self.pending[(s, batch_id)] = tups
        return True

    def _run_te(
        self,
        parent: WriteSet,
        proc: Procedure,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        scope: _Scope | None,
        span: Span | None = None,
    ) -> bool:
        """Run one TE; False if it aborted (outside a nested transaction). A spanning TE
        (`span`) reads through the participants' reads, keeps only this engine's writes,
        and only its leader emits outputs and dead letters.

        A member of a nested transaction writes straight into the transaction's write set:
        any member's abort drops that whole set, so a layer of its own would buy nothing."""
        ws = parent if scope is not None else WriteSet(parent)
        if span is None and scope is not None:
            span = scope.span
        decl = self.dataflow.decl
        ctx = TeContext(
            proc,
            batch_id,
            ws,
            self.ledger.base if span is None else span.base,
            decl.tables,
            decl.windows,
            self.params,
            decl.insert_triggers,
            self._on_slide,
            flat_tables=self.flat_tables,
        )
        self.ledger.group.stats.executions += 1
        started = time.perf_counter()
        try:
            proc.fn(ctx, tuples)
            outputs = [OutputBatch(s, batch_id, tups) for s, tups in ctx.outputs.items()]
            if self.hops:
                outputs += hop_batches(self.hops, outputs, self.owner)
            if self.record_check is not None and scope is None:
                # a spanning TE's every write and output, on every participant alike: a
                # record too large aborts the batch everywhere, not on its owner alone
                outputs = self.record_check(ws, outputs)
            if span is not None and scope is None:
                keep_local(ws, span.plan, span.me)
                outputs = outputs if span.leader else []
        except TxnAbort as e:
            if scope is not None or span is None or span.leader:
                self._abort(proc, stream, batch_id, e.reason, str(e), scope)
            return False
        except StateUnavailable:
            raise
        except Exception as e:
            if scope is not None or span is None or span.leader:
                self._abort(proc, stream, batch_id, "exception", exception_detail(e), scope)
            return False
        if self.timer is not None:
            self.timer(proc.name, time.perf_counter() - started)
        if scope is None:
            self.merge(ws, parent)
        (scope.outputs if scope is not None else self.ledger.group.outputs).extend(outputs)
        for out in outputs:
            if out.hop is None:
                self._deliver(parent, out.stream, batch_id, out.tuples, scope)
        return True

    def _abort(
        self,
        proc: Procedure,
        stream: str,
        batch_id: int,
        reason: str,
        error: str,
        scope: _Scope | None,
    ) -> None:
        if scope is not None:
            raise _NestedAbort(proc.name, reason, error)
        self.ledger.group.aborts.append(AbortRecord(proc.name, stream, batch_id, reason, error))

    def _on_slide(self, ctx: TeContext, window: str, slides: int) -> None:
        """Once per sliding insert: a jump over several boundaries shows only the last window."""
        slides_by = self.ledger.group.stats.slides
        slides_by[window] = slides_by.get(window, 0) + slides
        for trigger in self.dataflow.decl.slide_triggers.get(window, ()):
            trigger.fn(ctx)
