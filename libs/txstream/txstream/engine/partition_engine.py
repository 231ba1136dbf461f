"""The partition engine: transaction executions run one at a time, as in H-Store.

One engine owns one partition of a dataflow. For each input batch it runs the consuming
procedures in graph order; a committed TE's outputs fire the downstream procedures
in-process (PE triggers). A nested transaction runs its members for the batch inside one
shared write set, so nothing interleaves and it commits only if every member commits.

The engine never talks to Kafka: it accumulates a `Group` (overlay, outputs, aborts,
positions, and for command-logging recovery a journal of what ran) that the commit path
writes in one Kafka transaction. Recovery replays a journal through `replay` with PE
triggers off (strong) or through `process` with them on (weak).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

from txstream.engine import formulas
from txstream.engine.context import TxnContext
from txstream.engine.group import (
    OLTP_STREAM,
    SYS_TABLE,
    AbortRecord,
    BatchRun,
    Group,
    Journal,
    JournalEntry,
    Outcome,
    OutputBatch,
    Seal,
    batch_digest,
    digest_key,
    last_batch_key,
    position_key,
)
from txstream.engine.history import History
from txstream.engine.hops import HopInbox, hop_batches, marker_key
from txstream.engine.participant import Participant
from txstream.engine.span_runner import Span, SpanRunner
from txstream.engine.spanning import Owner, keep_local
from txstream.engine.writeset import TOMBSTONE, Base, WriteSet, read
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import NestedTransaction, Procedure, Record
from txstream.model.errors import StateUnavailable, TxnAbort, exception_detail
from txstream.oltp.messages import Decision, EngineRequest


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


class PartitionEngine:
    def __init__(
        self,
        dataflow: Dataflow,
        base: Base,
        partition: int,
        params: Mapping[str, Any],
        journal: Journal = Journal.NONE,
        timer: Callable[[str, float], None] | None = None,
        seal: Seal | None = None,
        flat_tables: frozenset[str] = frozenset(),
        owner: Owner | None = None,
        partitions: int = 1,
    ) -> None:
        """`timer(procedure, seconds)` is told each TE's latency (for metrics);
        `flat_tables` name the tables whose schema holds only scalars (`TxnContext`);
        `owner(key)` is the partition owning a key (the routing function), which spanning
        and repartitioned procedures need: without it, this engine owns every key; and
        `partitions` is the number of engines, which ordered hops hear from.

        Building an engine reads nothing from `base`: it may be behind its changelog (RocksDB
        runs without a write-ahead log), and what the engine keeps in it is taken by
        `load`, once it is caught up."""
        self.df = dataflow
        self.timer = timer
        self.seal = seal
        self.flat_tables = flat_tables
        self.base = base
        self.partition = partition
        self.params = params
        self.journal = journal
        self.group = Group()
        # PE triggers off (strong replay): committed outputs wait here, by (stream, batch id),
        # for the logged TEs that consume them, instead of firing their consumers.
        self.triggers = True
        self.pending: dict[tuple[str, int], Sequence[Record]] = {}
        self._source: tuple[str, str, int] | None = None  # (stream, topic, offset) in hand
        self.participant = Participant(self)
        self.owner: Owner = owner or (lambda key: partition)
        self.spanning = frozenset(dataflow.spanning_streams)
        self._local_in_flight = False  # the group taken in flight holds per-partition work
        self.spans = SpanRunner(self)
        self.history: History | None = None  # a spanning stream's, made by `load`
        self._loaded = False
        self.hops = tuple(dataflow.decl.procedures[p] for p in dataflow.hops)
        self.partitions = partitions
        self.inboxes = {
            h.name: HopInbox(h.name, partitions, self.sys_value, self.set_sys)
            for h in self.hops
            if h.ordered
        }
        # ordered hops fed from here: the progress they follow (an inbox, or a border stream)
        self._marked = [(h, dataflow.chain_start(h.name)) for h in self.hops if h.ordered]

    def load(self) -> list[str]:
        """Take what the engine keeps in its state: below PL3 the values of the epoch in
        progress (`SpanRunner.load`), the spanning stream's last batch (the point cut
        queries are answered at), and the prepared and promised transactions, which go on
        holding their rows; returns the prepared ones' ids. Once, before the first input.

        The order of a start is restore, load, serve. With changelog recovery the store
        must be caught up with the changelog first (`recovery.changelog.restore`): after a
        SIGKILL it is behind, and values loaded from it then would be ones a later batch
        left, or none. With command-log recovery, load comes before `recovery.replay`: the
        store stands at a log offset of its own (data and offset in one write batch), and
        the replay runs the logged work from there, so it needs the state as of that
        offset: a replayed decision must find the transaction prepared before it held.
        Loaded after the replay, the decision would have found nothing and been dropped,
        and the load would then hold that transaction with its decision already read past.

        An engine that serves before `load` was called loads then (so a base that is never
        behind, as in tests, needs no call); a later `load` is refused."""
        if self._loaded:
            raise RuntimeError(
                "the engine's state is loaded already (by load(), or by the first input "
                "it served): load() comes once, after the store is restored and before "
                "any input, or it would hold prepared transactions twice"
            )
        self._loaded = True
        if self.spanning:  # one at most (`Dataflow`)
            (stream,) = self.spanning
            point = self.sys_value(last_batch_key(stream, self.partition))
            self.history = History(stream, point, frozenset(self.df.decl.tables))
        self.spans.load()
        self.participant.load()
        return sorted(self.participant.prepared)

    @property
    def blocked(self) -> bool:
        """A prepared 2PC transaction holds rows: dataflow TEs wait for its decision."""
        if not self._loaded:  # whether one is held is known once loaded (`load`)
            self.load()
        return self.participant.blocked

    def request(self, req: EngineRequest) -> bool:
        """An OLTP request; False if it must wait for a 2PC decision (nothing applied)."""
        if not self._loaded:  # it may touch rows a transaction held since before (`load`)
            self.load()
        applied = self.participant.request(req)
        self.group.local |= applied and req.kind != "read"
        return applied

    def decide(self, decision: Decision) -> None:
        if not self._loaded:  # it may name a transaction prepared before (`load`)
            self.load()
        self.participant.decide(decision)
        self.group.local = True

    @property
    def local_uncommitted(self) -> bool:
        """Per-partition work is in the group, or in the commit in flight."""
        return self.group.local or self._local_in_flight

    def reinquire(self, every_s: float) -> bool:
        """Ask again for decisions awaited longer than `every_s`; True if any vote was re-sent."""
        if not self._loaded:  # the decisions awaited include those held since before
            self.load()
        return self.participant.reinquire(every_s)

    def position(self, topic: str) -> int:
        """The next offset to read on `topic` for this partition, as of the group."""
        return self.sys_value(position_key(topic, self.partition)) or 0

    def take_group(self, in_flight: bool = False) -> Group:
        """Hand the accumulated group to the commit path and start a new one. A group
        taken `in_flight` is not in the base yet: the new one reads through its writes
        until `committed` says they are."""
        self.spans.settle()
        if self._marked:
            self._mark_progress()
        group = self.group
        for stream, record in group.records.items():
            key = digest_key(stream, self.partition)
            if record is None:
                group.ws.put(SYS_TABLE, key, TOMBSTONE)
            else:
                group.ws.put(SYS_TABLE, key, {"value": batch_digest(record)})
        group.records.clear()
        self.group = Group(WriteSet(group.ws)) if in_flight else Group()
        self._local_in_flight = in_flight and group.local
        return group

    def committed(self) -> None:
        """The group taken last is in the base store: stop reading through it."""
        self.group.ws.parent = None
        self._local_in_flight = False

    def sys_value(self, key: tuple[str, str, int]) -> int | None:
        row = read(self.group.ws, self.base, SYS_TABLE, key)
        return None if row is None else int(row["value"])

    def process(
        self,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        source: tuple[str, int, int] | None = None,
        record: bytes | None = None,
    ) -> Outcome:
        """Run every procedure reachable from `stream` on this batch, in graph order.

        `source` is the (topic, partition, offset) the batch came from; the next offset is
        recorded in the same group, so inputs and effects commit together. `record` is the
        batch's record, whose `batch_digest` is kept beside the batch id (computed once per
        group, for the last batch of each stream). A batch id not above the last one seen
        on this stream partition is skipped if it is an exact re-send of the last batch (the
        same digest), and otherwise dead-lettered: processing it would break stream order,
        and skipping it quietly would lose it.
        """
        if not self._loaded:  # its TEs read what the state keeps (`load`)
            self.load()
        ws = self.group.ws
        key = last_batch_key(stream, self.partition)
        last = self.sys_value(key)
        if stream in self.spanning:
            return self._spanning_batch(stream, batch_id, tuples, source, record, last)
        self.group.local = True
        if last is None or batch_id > last:
            self._source = None if source is None else (stream, source[0], source[2])
            if self.journal is Journal.BORDER:
                self.group.journal.append(self._entry(stream, batch_id, None))
            self._deliver(ws, stream, batch_id, tuples, None)
            self._source = None
            self.completed(stream, batch_id, record)
            outcome = Outcome.PROCESSED
        else:
            outcome = self._stale(stream, batch_id, last, record)
        self.passed(source)
        return outcome

    def process_hop(
        self,
        procedure: str,
        sender: int,
        batch_id: int,
        tuples: Sequence[Record],
        source: tuple[str, int, int],
    ) -> None:
        """A record of repartitioned `procedure`'s topic, read at `source`: engine
        `sender`'s part of batch `batch_id`, or (no tuples) its progress marker. A part is
        one TE, whose effects commit with the topic's next offset; the senders'
        transactions put each part there exactly once, so no batch id needs checking. An
        ordered hop's parts wait in its inbox until their batch is whole (`HopInbox`),
        run as one TE, and the position stays at the oldest waiting one."""
        if not self._loaded:  # its TEs read what the state keeps (`load`)
            self.load()
        proc = self.df.decl.procedures[procedure]
        inbox = self.inboxes.get(procedure)
        self.group.local = True
        if inbox is None:
            if tuples:
                self._dispatch(self.group.ws, proc, proc.input, batch_id, tuples)
                self.group.batches += 1
            self.passed(source)
            return
        inbox.receive(sender, batch_id, tuples, source[2])
        for ready, parts in inbox.ready():
            whole = [t for part in parts for t in part.tuples]
            self._dispatch(self.group.ws, proc, proc.input, ready, whole)
            self.group.batches += 1
        position = inbox.position()
        if position is not None:
            self.set_position(source[0], position)
        frontier = inbox.frontier()
        if frontier is not None:  # the commit notice says how far: every part up to it ran
            self.group.first_batch_ids.setdefault(proc.input, frontier)
            self.group.last_batch_ids[proc.input] = frontier

    def progress(self, stream: str, batch_id: int, source: tuple[str, int, int]) -> None:
        """A producer's progress mark on border `stream`: every batch up to `batch_id` has
        been sent to this partition. It counts as the last batch seen, so an ordered hop fed
        from here may pass it, and a later batch not above it is refused as stale."""
        key = last_batch_key(stream, self.partition)
        last = self.sys_value(key)
        if stream in self.spanning:
            self.spans.reached(source[0], source[2] + 1)
        elif last is None or batch_id > last:
            self.set_sys(key, batch_id)
        if not self.spans.queue:
            self.passed(source)

    def _mark_progress(self) -> None:
        """Tell every engine's inbox of each ordered hop fed from here how far this engine
        has come, with the group, after its parts: a marker (a part with no tuples)."""
        for hop, start in self._marked:
            if start.repartitioned:
                passed = self.inboxes[start.name].frontier()
            else:
                passed = self.sys_value(last_batch_key(start.input, self.partition))
            key = marker_key(hop.name)
            sent = self.sys_value(key)
            if passed is None or (sent is not None and passed <= sent):
                continue
            self.set_sys(key, passed)
            self.group.outputs += [
                OutputBatch(hop.input, passed, [], hop=hop.name, partition=q)
                for q in range(self.partitions)
            ]

    def completed(self, stream: str, batch_id: int, record: bytes | None) -> None:
        """Batch `batch_id` of `stream` is done here: the last one, its record's digest
        kept, and counted in the group; serializable reads waiting for it are answered."""
        self.set_sys(last_batch_key(stream, self.partition), batch_id)
        self.group.records[stream] = record
        self.group.batches += 1
        self.group.first_batch_ids.setdefault(stream, batch_id)
        self.group.last_batch_ids[stream] = batch_id
        order = self.group.order
        if order and order[-1].stream == stream:
            order[-1].last = batch_id
        else:
            order.append(BatchRun(stream, batch_id, batch_id))
        if self.history is not None and stream == self.history.stream:
            self.history.passed(batch_id)
            self.participant.serve(batch_id)

    def merge(self, ws: WriteSet, parent: WriteSet | None = None) -> None:
        """Merge a finished write set into `parent` (the group's by default), keeping what
        it overwrites in the group for serializable reads (`History`)."""
        if parent is None:
            parent = self.group.ws
        if ws.formulas:  # recomputed from the group's rows now (`engine.formulas`)
            if parent is self.group.ws:
                formulas.rebase(ws, parent, self.base)
            else:
                formulas.carry(ws, parent)
        history = self.history
        if history is not None and history.recording and parent is self.group.ws:
            history.record(ws, parent, self.base)
        ws.merge_into(parent)

    def passed(self, source: tuple[str, int, int] | None) -> None:
        """The input record at `source` (topic, partition, offset) is behind us: the next
        offset is the position, committed with the effects."""
        if source is not None:
            topic, part, offset = source
            self.set_sys(position_key(topic, part), offset + 1)

    def _stale(self, stream: str, batch_id: int, last: int, record: bytes | None) -> Outcome:
        """A batch id not above `last`: a re-send of the last batch, or a dead letter."""
        digest = None if record is None else batch_digest(record)
        if stream in self.group.records:
            held = self.group.records[stream]
            known = None if held is None else batch_digest(held)
        else:
            known = self.sys_value(digest_key(stream, self.partition))
        if batch_id == last and digest is not None and digest == known:
            self.group.stale[(stream, "resend")] += 1
            return Outcome.DUPLICATE
        if batch_id < last:
            why = "batch ids must increase"
        elif digest is not None and known is not None:
            why = "its content differs from that batch's"
        else:
            why = "it cannot be checked against that batch's content"
        self.group.aborts.append(
            AbortRecord(
                "<input>",
                stream,
                batch_id,
                "stale_batch_id",
                f"batch id {batch_id} on stream {stream!r} partition {self.partition} is not "
                f"above the last batch id {last} processed there, and {why}: not processed",
            )
        )
        self.group.stale[(stream, "dead_letter")] += 1
        return Outcome.STALE

    def _spanning_batch(
        self,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        source: tuple[str, int, int] | None,
        record: bytes | None,
        last: int | None,
    ) -> Outcome:
        """A spanning stream's batch: queued if its id is above every id taken (queued or
        completed); an exact re-send is skipped, anything else dead-lettered. The input
        position moves only as queued batches complete (`SpanRunner`)."""
        if source is not None:
            self.spans.reached(source[0], source[2] + 1)
        queued = self.spans.last_queued(stream)
        seen = last if queued is None else queued
        if seen is None or batch_id > seen:
            self.spans.process(stream, batch_id, tuples, source, record)
            return Outcome.PROCESSED
        repeat = queued is not None and batch_id > (last or 0)
        if repeat and self.spans.repeat(stream, batch_id, record):
            return Outcome.DUPLICATE
        outcome = self._stale(stream, batch_id, seen, record)
        if not self.spans.queue:
            self.passed(source)
        return outcome

    def run_span(
        self, proc: Procedure, batch_id: int, tuples: Sequence[Record], span: Span
    ) -> None:
        """A spanning batch here: one TE, or the whole nested transaction `proc` roots. One
        reading as of its epoch's start runs over a write set of its own, not the group's
        (which holds its epoch's earlier batches), merged into the group once it is done."""
        nested = self.df.nested_of.get(proc.name)
        if self.history is not None:
            self.history.running = batch_id  # its writes are batch `batch_id`'s side of a cut
        parent = WriteSet() if span.epoch else self.group.ws
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

    def replay(
        self, entry: JournalEntry, tuples: Sequence[Record], digest: int | None = None
    ) -> None:
        """Re-run one strong-log entry with PE triggers off: its outputs go to `pending`.
        A border entry's batch id (and `digest`, its record's) become the last seen again."""
        if not self._loaded:  # the replay needs the state as of the log offset (`load`)
            self.load()
        if entry.procedure is None:
            raise ValueError(f"entry for {entry.stream} batch {entry.batch_id} names no procedure")
        if entry.topic is not None:
            self.set_sys(last_batch_key(entry.stream, self.partition), entry.batch_id)
            if digest is not None:
                self.set_sys(digest_key(entry.stream, self.partition), digest)
        if not entry.aborted:
            proc = self.df.decl.procedures[entry.procedure]
            self._dispatch(self.group.ws, proc, entry.stream, entry.batch_id, tuples)

    def fire_pending(self, done: set[tuple[str, str, int]]) -> None:
        """Triggers back on: run each pending batch's consumers that `done` does not list."""
        pending, self.pending = self.pending, {}
        for (stream, batch_id), tuples in pending.items():
            for proc in self.df.consumers.get(stream, ()):
                if (proc.name, stream, batch_id) not in done:
                    self._dispatch(self.group.ws, proc, stream, batch_id, tuples)

    def journal_oltp(self, topic: str, offset: int) -> None:
        """Log an OLTP record handled here (a request, decision or promise), by where to
        read it again: both recovery modes replay OLTP transactions, in the order they ran,
        and so does `txstream verify`, from the group's order (runs of offsets)."""
        if self.journal is not Journal.NONE:
            self.group.journal.append(JournalEntry(OLTP_STREAM, -1, None, topic, offset))
        order = self.group.order
        if order and order[-1].stream == topic and order[-1].last == offset - 1:
            order[-1].last = offset
        else:
            order.append(BatchRun(topic, offset, offset))

    def set_sys(self, key: tuple[str, str, int], value: int) -> None:
        self.group.ws.put(SYS_TABLE, key, {"value": value})

    def set_position(self, topic: str, next_offset: int) -> None:
        self.set_sys(position_key(topic, self.partition), next_offset)

    def reject(self, stream: str, source: tuple[str, int, int], reason: str, error: str) -> None:
        """An input record that is not a batch at all: record why, and move past it."""
        self.group.aborts.append(AbortRecord("<input>", stream, -1, reason, error))
        self.passed(source)

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
        for proc in self.df.consumers.get(stream, ()):
            if proc.partition_by is not None:
                continue  # its part of the batch was routed with the producing TE's outputs
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
        entry = None
        if self.journal is Journal.ALL:
            entry = self._entry(stream, batch_id, proc.name)
            self.group.journal.append(entry)
        nested = self.df.nested_of.get(proc.name)
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
        try:
            self._run_te(nws, proc, stream, batch_id, tuples, scope)
            if self.seal is not None:
                scope.outputs = self.seal(nws, scope.outputs)
            if span is not None:
                keep_local(nws, span.plan, span.me)
                scope.outputs = scope.outputs if span.leader else []
        except _NestedAbort as a:
            if speaks:
                self.group.aborts.append(AbortRecord(
                    f"{nested.name}/{a.procedure}", stream, batch_id, a.reason, a.error
                ))  # fmt: skip
            return False
        except TxnAbort as e:  # sealed as a whole: no one member is to blame
            if speaks:
                self.group.aborts.append(
                    AbortRecord(nested.name, stream, batch_id, e.reason, str(e))
                )
            return False
        self.merge(nws, parent)
        self.group.outputs.extend(scope.outputs)
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
        decl = self.df.decl
        ctx = TxnContext(
            proc,
            batch_id,
            ws,
            self.base if span is None else span.base,
            decl.tables,
            decl.windows,
            self.params,
            decl.insert_triggers,
            self._on_slide,
            flat_tables=self.flat_tables,
        )
        self.group.executions += 1
        started = time.perf_counter()
        try:
            proc.fn(ctx, tuples)
            outputs = [OutputBatch(s, batch_id, tups) for s, tups in ctx.outputs.items()]
            if self.hops:
                outputs += hop_batches(self.hops, outputs, self.owner)
            if self.seal is not None and scope is None:
                # a spanning TE's every write and output, on every participant alike: a
                # record too large aborts the batch everywhere, not on its owner alone
                outputs = self.seal(ws, outputs)
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
        (scope.outputs if scope is not None else self.group.outputs).extend(outputs)
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
        self.group.aborts.append(AbortRecord(proc.name, stream, batch_id, reason, error))

    def _on_slide(self, ctx: TxnContext, window: str, slides: int) -> None:
        """Once per sliding insert: a jump over several boundaries shows only the last window."""
        self.group.slides[window] = self.group.slides.get(window, 0) + slides
        for trigger in self.df.decl.slide_triggers.get(window, ()):
            trigger.fn(ctx)
