"""The partition engine: transaction executions run one at a time, as in H-Store.

One engine owns one partition of a dataflow, and fronts the parts that do the work:

- `BatchLedger`: the group in progress, input positions, last batch ids and digests;
- `TeExecutor`: a batch's procedures in graph order, nested transactions, PE triggers;
- `SpanRunner`: spanning batches, run once every participant's reads are in;
- `HopRouter`: parts of repartitioned procedures' batches from other engines;
- `Participant`: OLTP transactions, 2PC and promises, serial with the TEs;
- `CommittedReader`: reads of the committed state between groups, without a commit.

Each part receives the ledger and executor it needs, never the engine. The engine never
talks to Kafka: the commit path takes its group (`take_group`) and writes it in one Kafka
transaction. Recovery replays a journal through `replay` with PE triggers off (strong) or
through `process` with them on (weak).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from txstream.engine.committed_reads import CommittedReader
from txstream.engine.executor import TeExecutor
from txstream.engine.group import (
    CommitGroup,
    Journal,
    JournalEntry,
    Outcome,
    RecordCheck,
    Source,
    SysKey,
    digest_key,
    last_batch_key,
)
from txstream.engine.history import History
from txstream.engine.hop_router import HopRouter
from txstream.engine.hops import HopInbox
from txstream.engine.ledger import BatchLedger
from txstream.engine.participant import Participant
from txstream.engine.span_runner import SpanRunner
from txstream.engine.spanning import Owner
from txstream.engine.writeset import Base
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Record
from txstream.oltp.messages import ENDPOINT_REPLY, Decision, EngineRequest


class PartitionEngine:
    def __init__(
        self,
        dataflow: Dataflow,
        base: Base,
        partition: int,
        params: Any,
        journal: Journal = Journal.NONE,
        timer: Callable[[str, float], None] | None = None,
        record_check: RecordCheck | None = None,
        flat_tables: frozenset[str] = frozenset(),
        owner: Owner | None = None,
        partitions: int = 1,
    ) -> None:
        """`timer(procedure, seconds)` is told each TE's latency (for metrics);
        `flat_tables` name the tables whose schema holds only scalars (`TeContext`);
        `owner(key)` is the partition owning a key (the routing function), which spanning
        and repartitioned procedures need: without it, this engine owns every key; and
        `partitions` is the number of engines, which ordered hops hear from.

        Building an engine reads nothing from `base`: it may be behind its changelog (RocksDB
        runs without a write-ahead log), and what the engine keeps in it is taken by
        `load`, once it is caught up."""
        self.dataflow = dataflow
        self.base = base
        self.partition = partition
        self.partitions = partitions
        self.owner: Owner = owner or (lambda key: partition)
        self.ledger = BatchLedger(base, partition)
        self.executor = TeExecutor(
            dataflow, self.ledger, params, self.owner, journal, timer, record_check, flat_tables
        )
        self.spans = SpanRunner(
            dataflow, self.ledger, self.executor, self.owner, released=self._released
        )
        self.participant = Participant(self.ledger, self.executor, read_out=self.spans.reading)
        self.reader = CommittedReader(
            self.ledger,
            self.participant.fragments,
            dataflow.decl.tables,
            self.participant.guard,
            self.participant.promises.writes,
        )
        self.spanning = frozenset(dataflow.spanning_streams)
        self.hop_router = HopRouter(dataflow, self.ledger, self.executor, partitions)
        self.inboxes: Mapping[str, HopInbox] = self.hop_router.inboxes
        self._loaded = False

    @property
    def group(self) -> CommitGroup:
        """The group in progress (`BatchLedger`)."""
        return self.ledger.group

    @property
    def history(self) -> History | None:
        """The spanning stream's history, for serializable reads (made by `load`)."""
        return self.executor.history

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
        if self.spanning:  # their batch ids are one order (`SpanRunner._admit`)
            lasts = [self.ledger.sys_value(last_batch_key(s, self.partition))
                     for s in sorted(self.spanning)]  # fmt: skip
            point = max((b for b in lasts if b is not None), default=None)
            history = History(point, frozenset(self.dataflow.decl.tables))
            self.executor.keep_history(history)
            for stream in self.spanning:
                self.ledger.watch(stream, self._spanning_completed)
        self.spans.load()
        self.participant.load()
        return sorted(self.participant.prepared)

    def _spanning_completed(self, batch_id: int) -> None:
        """A spanning batch completed: cut reads waiting for it are answered."""
        history = self.executor.history
        assert history is not None
        history.passed(batch_id)
        self.participant.serve(batch_id)

    # --- OLTP ----------------------------------------------------------------------------

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
        if applied and req.kind != "read":
            self.ledger.local()
        return applied

    def decide(self, decision: Decision) -> None:
        if not self._loaded:  # it may name a transaction prepared before (`load`)
            self.load()
        self.participant.decide(decision)
        self.ledger.local()

    def _released(self) -> None:
        """A spanning batch ran: committed promises that waited for its rows land now."""
        if self.participant.land():
            self.ledger.local()

    def reinquire(self, every_s: float) -> bool:
        """Ask again for decisions awaited longer than `every_s`; True if any vote was re-sent."""
        if not self._loaded:  # the decisions awaited include those held since before
            self.load()
        return self.participant.reinquire(every_s)

    def journal_oltp(self, topic: str, offset: int) -> None:
        """Log an OLTP record handled here (`BatchLedger.journal_oltp`)."""
        self.ledger.journal_oltp(topic, offset, self.executor.journal)

    def call(self, req: EngineRequest) -> bool:
        """A direct transaction sent to the worker's endpoint (`runtime.direct_calls`), as
        `request`; the group's order names that such calls ran, for `txstream verify`,
        which has no input record of them to replay."""
        applied = self.request(req)
        if applied:
            self.ledger.ran(ENDPOINT_REPLY, 0, by_offset=False)
        return applied

    # --- the ledger ----------------------------------------------------------------------

    @property
    def local_uncommitted(self) -> bool:
        """Per-partition work is in the group, or in the commit in flight."""
        return self.ledger.local_uncommitted

    def position(self, topic: str) -> int:
        """The next offset to read on `topic` for this partition, as of the group."""
        return self.ledger.position(topic)

    def set_position(self, topic: str, next_offset: int) -> None:
        self.ledger.set_position(topic, next_offset)

    def sys_value(self, key: SysKey) -> int | None:
        return self.ledger.sys_value(key)

    def reject(self, stream: str, source: Source, reason: str, error: str) -> None:
        """An input record that is not a batch at all: record why, and move past it."""
        self.ledger.reject(stream, source, reason, error)

    def take_group(self, in_flight: bool = False) -> CommitGroup:
        """Hand the accumulated group to the commit path and start a new one. A group
        taken `in_flight` is not in the base yet: the new one reads through its writes
        until `committed` says they are."""
        self.spans.settle()
        self.hop_router.mark_progress()
        return self.ledger.take(in_flight)

    def committed(self) -> None:
        """The group taken last is in the base store: stop reading through it."""
        self.ledger.committed()

    # --- input ---------------------------------------------------------------------------

    def process(
        self,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        source: Source | None = None,
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
        ledger = self.ledger
        last = ledger.sys_value(last_batch_key(stream, self.partition))
        if stream in self.spanning:
            return self._spanning_batch(stream, batch_id, tuples, source, record, last)
        ledger.local()
        if last is None or batch_id > last:
            self.executor.run_border(stream, batch_id, tuples, source)
            ledger.batch_done(stream, batch_id, record)
            outcome = Outcome.PROCESSED
        else:
            outcome = ledger.stale(stream, batch_id, last, record)
        ledger.advance(source)
        return outcome

    def process_hop(
        self,
        procedure: str,
        sender: int,
        batch_id: int,
        tuples: Sequence[Record],
        source: Source,
    ) -> None:
        """Engine `sender`'s part of batch `batch_id` of repartitioned `procedure`
        (`HopRouter.receive`)."""
        if not self._loaded:  # its TEs read what the state keeps (`load`)
            self.load()
        self.hop_router.receive(procedure, sender, batch_id, tuples, source)

    def run_hop(self, procedure: str, batch_id: int, tuples: Sequence[Record]) -> None:
        """Repartitioned `procedure` on a batch as it ran on its engine (a part, or an
        ordered batch's parts together), out of any inbox: a replay's (`txstream verify`)."""
        if not self._loaded:
            self.load()
        self.hop_router.run(procedure, batch_id, tuples)

    def progress(self, stream: str, batch_id: int, source: Source | None) -> None:
        """A producer's progress mark on border `stream`: every batch up to `batch_id` has
        been sent to this partition. It counts as the last batch seen, so an ordered hop fed
        from here may pass it, and a later batch not above it is refused as stale."""
        key = last_batch_key(stream, self.partition)
        last = self.ledger.sys_value(key)
        if stream in self.spanning:
            if not self._loaded:  # it completes through the span queue (`load`)
                self.load()
            queued = self.spans.last_queued(stream)
            seen = last if queued is None else queued
            if seen is None or batch_id > seen:
                self.spans.passed(stream, batch_id, source)
            elif self.spans.idle:
                self.ledger.advance(source)
            if source is not None:
                self.spans.reached(source[0], source[2] + 1)
            return
        if last is None or batch_id > last:
            self.ledger.set_sys(key, batch_id)
        if self.spans.idle:
            self.ledger.advance(source)

    def _spanning_batch(
        self,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        source: Source | None,
        record: bytes | None,
        last: int | None,
    ) -> Outcome:
        """A spanning stream's batch: queued if its id is above every id taken (queued or
        completed); an exact re-send is skipped, anything else dead-lettered. The input
        position moves only as queued batches complete (`SpanRunner`)."""
        queued = self.spans.last_queued(stream)
        seen = last if queued is None else queued
        repeat = queued is not None and batch_id > (last or 0)
        if seen is None or batch_id > seen:
            self.spans.process(stream, batch_id, tuples, source, record)
            outcome = Outcome.PROCESSED
        elif repeat and self.spans.repeat(stream, batch_id, record):
            outcome = Outcome.DUPLICATE
        else:
            outcome = self.ledger.stale(stream, batch_id, seen, record)
            if self.spans.idle:
                self.ledger.advance(source)
        if source is not None:  # once queued: what waited for the catch-up waits for its rows
            self.spans.reached(source[0], source[2] + 1)
        return outcome

    # --- recovery ------------------------------------------------------------------------

    def replay(
        self, entry: JournalEntry, tuples: Sequence[Record], digest: int | None = None
    ) -> None:
        """Re-run one strong-log entry with PE triggers off: its outputs wait as pending.
        A border entry's batch id (and `digest`, its record's) become the last seen again."""
        if not self._loaded:  # the replay needs the state as of the log offset (`load`)
            self.load()
        if entry.procedure is None:
            raise ValueError(f"entry for {entry.stream} batch {entry.batch_id} names no procedure")
        if entry.topic is not None:
            self.ledger.set_sys(last_batch_key(entry.stream, self.partition), entry.batch_id)
            if digest is not None:
                self.ledger.set_sys(digest_key(entry.stream, self.partition), digest)
        if not entry.aborted:
            proc = self.dataflow.decl.procedures[entry.procedure]
            self.executor.run(proc, entry.stream, entry.batch_id, tuples)
