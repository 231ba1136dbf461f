"""The partition engine: transaction executions run one at a time, as in H-Store.

One engine owns one partition of a dataflow. For each input batch it runs the consuming
procedures in graph order; a committed TE's outputs fire the downstream procedures
in-process (PE triggers). A nested transaction runs its members for the batch inside one
shared write set, so nothing interleaves and it commits only if every member commits.

The engine never talks to Kafka: it accumulates a `Group` (overlay, outputs, aborts,
positions) that the commit path writes in one Kafka transaction.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from txstream.engine.context import TxnContext
from txstream.engine.writeset import Base as Base
from txstream.engine.writeset import WriteSet, read
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import NestedTransaction, Procedure, Record
from txstream.model.errors import TxnAbort

SYS_TABLE = "__sys__"


@dataclass(frozen=True)
class OutputBatch:
    stream: str
    batch_id: int
    tuples: Sequence[Record]


@dataclass(frozen=True)
class AbortRecord:
    procedure: str
    stream: str
    batch_id: int
    reason: str
    error: str


@dataclass
class Group:
    """Everything since the last group commit; written to Kafka as one transaction."""

    ws: WriteSet = field(default_factory=WriteSet)
    outputs: list[OutputBatch] = field(default_factory=list)
    aborts: list[AbortRecord] = field(default_factory=list)
    batches: int = 0
    executions: int = 0
    first_batch_ids: dict[str, int] = field(default_factory=dict)
    last_batch_ids: dict[str, int] = field(default_factory=dict)


class Outcome(StrEnum):
    PROCESSED = "processed"
    DUPLICATE = "duplicate"


@dataclass
class _Scope:
    """An open nested transaction: its outputs and the triggers it must fire after commit."""

    nested: NestedTransaction
    outputs: list[OutputBatch] = field(default_factory=list)
    deferred: list[tuple[Procedure, str, Sequence[Record]]] = field(default_factory=list)


class _NestedAbort(Exception):
    def __init__(self, procedure: str, reason: str, error: str) -> None:
        super().__init__(reason)
        self.procedure = procedure
        self.reason = reason
        self.error = error


def position_key(topic: str, partition: int) -> tuple[str, str, int]:
    return ("pos", topic, partition)


def last_batch_key(stream: str, partition: int) -> tuple[str, str, int]:
    return ("batch", stream, partition)


class PartitionEngine:
    def __init__(
        self, dataflow: Dataflow, base: Base, partition: int, params: Mapping[str, Any]
    ) -> None:
        self.df = dataflow
        self.base = base
        self.partition = partition
        self.params = params
        self.group = Group()

    def take_group(self) -> Group:
        """Hand the accumulated group to the commit path and start a new one."""
        group, self.group = self.group, Group()
        return group

    def sys_value(self, key: tuple[str, str, int]) -> int | None:
        row = read(self.group.ws, self.base, SYS_TABLE, key)
        return None if row is None else int(row["value"])

    def process(
        self,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        source: tuple[str, int, int] | None = None,
    ) -> Outcome:
        """Run every procedure reachable from `stream` on this batch, in graph order.

        `source` is the (topic, partition, offset) the batch came from; the next offset is
        recorded in the same group, so inputs and effects commit together. A batch id not
        above the last one seen on this stream partition is an exact re-send and is skipped.
        """
        ws = self.group.ws
        key = last_batch_key(stream, self.partition)
        last = self.sys_value(key)
        outcome = Outcome.DUPLICATE
        if last is None or batch_id > last:
            self._deliver(ws, stream, batch_id, tuples, None)
            ws.put(SYS_TABLE, key, {"value": batch_id})
            self.group.batches += 1
            self.group.first_batch_ids.setdefault(stream, batch_id)
            self.group.last_batch_ids[stream] = batch_id
            outcome = Outcome.PROCESSED
        if source is not None:
            topic, part, offset = source
            ws.put(SYS_TABLE, position_key(topic, part), {"value": offset + 1})
        return outcome

    def reject(self, stream: str, source: tuple[str, int, int], reason: str, error: str) -> None:
        """An input record that is not a batch at all: record why, and move past it."""
        self.group.aborts.append(AbortRecord("<input>", stream, -1, reason, error))
        topic, part, offset = source
        self.group.ws.put(SYS_TABLE, position_key(topic, part), {"value": offset + 1})

    def _deliver(
        self,
        parent: WriteSet,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        scope: _Scope | None,
    ) -> None:
        for proc in self.df.consumers.get(stream, ()):
            nested = self.df.nested_of.get(proc.name)
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
        nested = self.df.nested_of.get(proc.name)
        if nested is not None:
            self._run_nested(parent, nested, proc, stream, batch_id, tuples)
        else:
            self._run_te(parent, proc, stream, batch_id, tuples, None)

    def _run_nested(
        self,
        parent: WriteSet,
        nested: NestedTransaction,
        proc: Procedure,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
    ) -> None:
        scope = _Scope(nested)
        nws = WriteSet(parent)
        try:
            self._run_te(nws, proc, stream, batch_id, tuples, scope)
        except _NestedAbort as a:
            self.group.aborts.append(
                AbortRecord(f"{nested.name}/{a.procedure}", stream, batch_id, a.reason, a.error)
            )
            return
        nws.merge_into(parent)
        self.group.outputs.extend(scope.outputs)
        for p, s, tups in scope.deferred:
            self._dispatch(parent, p, s, batch_id, tups)

    def _run_te(
        self,
        parent: WriteSet,
        proc: Procedure,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        scope: _Scope | None,
    ) -> None:
        ws = WriteSet(parent)
        decl = self.df.decl
        ctx = TxnContext(
            proc,
            batch_id,
            ws,
            self.base,
            decl.tables,
            decl.windows,
            self.params,
            decl.insert_triggers,
            self._on_slide,
        )
        self.group.executions += 1
        try:
            proc.fn(ctx, tuples)
        except TxnAbort as e:
            self._abort(proc, stream, batch_id, e.reason, str(e), scope)
            return
        except Exception as e:
            detail = "".join(traceback.format_exception_only(e)).strip()
            self._abort(proc, stream, batch_id, "exception", detail, scope)
            return
        ws.merge_into(parent)
        outputs = [OutputBatch(s, batch_id, tups) for s, tups in ctx.outputs.items()]
        (scope.outputs if scope is not None else self.group.outputs).extend(outputs)
        for out in outputs:
            self._deliver(parent, out.stream, batch_id, out.tuples, scope)

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
        self.group.aborts.append(AbortRecord(proc.name, stream, batch_id, reason, error))

    def _on_slide(self, ctx: TxnContext, window: str, slides: int) -> None:
        """Once per sliding insert: a jump over several boundaries shows only the last window."""
        for trigger in self.df.decl.slide_triggers.get(window, ()):
            trigger.fn(ctx)
