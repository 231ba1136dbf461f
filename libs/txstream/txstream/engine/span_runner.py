"""Spanning batches inside one engine: many in flight, each run once its reads are in.

Batches of a spanning stream arrive in batch order: at least every batch that touches this
engine (routed to their participants, with progress marks between, `passed`; or all of
them, broadcast), and those of several spanning streams join one queue in one global order
(`_admit`). A queued batch starts (its reads of this engine's keys go to the other
participants) as soon as no earlier batch still to run here declares one of its keys here,
so its reads see every earlier batch that could change them, and batches on other keys
overlap their round trips, as with Calvin's deterministic locks. Batches run in batch
order, each once every other participant's reads are in, and complete as they run: what a
group commits is always a prefix of the input (writes, outputs, last batch id and position
together), and a restart re-runs the rest to the same results. (Running a later batch first
would commit its writes without its place in the input, and the restart would apply them
twice.)

A batch's reads go out outside the engine's transaction (the task sends them with the others
of its poll, and before the group that completes the batch commits), so what they saw must be
what a restarted engine sees again when it re-runs the batch from the last commit. Three
rules keep per-partition work (a per-partition batch, an OLTP write, a 2PC decision) out of
every read sent before it commits, in whatever order the input topics are read again
(`holds`): while any batch is queued, per-partition input waits (it could change rows whose
values were sent); while per-partition work is not committed, spanning input waits (its
reads would hold it); and after a restart, per-partition input waits until the spanning
input is read to the committed end it had at the restart (`catch_up`), so every batch
whose reads may have gone out before the crash runs again first, on the state they saw.

Below PL3 a batch reads as of its epoch's start (`engine.epochs`): it waits only for the
batches of earlier epochs on its keys, not for those of its own epoch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from txstream.engine.epochs import EpochReads
from txstream.engine.executor import TeExecutor
from txstream.engine.group import (
    AbortRecord,
    Source,
    SpanPart,
    last_batch_key,
    position_key,
)
from txstream.engine.ledger import BatchLedger
from txstream.engine.spanning import Owner, Reads, Rows, Span, SpanBase, SpanPlan, local_reads
from txstream.engine.writeset import WriteSet, read
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Key, Procedure, Record
from txstream.model.errors import exception_detail

# Spanning batches queued in one engine at most; past that the task defers their records.
MAX_QUEUED = 256


class _State(Enum):
    QUEUED = "queued"  # waits for an earlier batch on one of its keys here
    SENT = "sent"  # its reads are out; waits for the others'
    DONE = "done"  # run (or nothing to run here); waits for the batches before it


@dataclass
class _Entry:
    proc: Procedure
    batch_id: int
    tuples: Sequence[Record]
    source: Source | None
    record: bytes | None
    plan: SpanPlan | None  # None: its `touches` failed
    local: frozenset[tuple[str, Key]] = frozenset()
    state: _State = _State.QUEUED
    rows: Rows = field(default_factory=dict)
    missing: set[int] = field(default_factory=set)
    offsets: list[int] = field(default_factory=list)  # exchange records taken for it
    aborts: list[AbortRecord] = field(default_factory=list)  # its `touches` failed
    started: float = 0.0  # monotonic time its reads went out
    epoch: int | None = None  # below PL3: the epoch it reads as of the start of
    mark: bool = False  # a progress mark, not a batch: nothing to run
    taken_at: float = 0.0  # monotonic time it was taken in


class SpanRunner:
    """Each key here has a lock queue of the batches declaring it, in batch order; a batch
    starts once it heads every one of its keys' queues (Calvin's deterministic locks), and
    leaves them when it runs. Work per batch is a few dict operations, however long the
    queue."""

    def __init__(
        self,
        dataflow: Dataflow,
        ledger: BatchLedger,
        executor: TeExecutor,
        owner: Owner,
        released: Callable[[], None] = lambda: None,
    ) -> None:
        """`released()` is called each time a batch has run and let go of its rows, and
        when the spanning input has caught up after a start."""
        self.dataflow = dataflow
        self.ledger = ledger
        self.executor = executor
        self.owner = owner
        self.released = released
        self.queue: deque[_Entry] = deque()
        self._by_id: dict[tuple[str, int], _Entry] = {}
        self._tail: dict[str, int] = {}  # stream -> its last batch id taken in
        # Spanning streams in the order their batches of one id run (`_admit`), and, per
        # stream, the batches taken in that wait for the others' to come past them.
        self._rank = {s: i for i, s in enumerate(sorted(dataflow.spanning_streams))}
        self._arrived: dict[str, deque[_Entry]] = {s: deque() for s in self._rank}
        self._locks: dict[tuple[str, Key], deque[_Entry]] = {}
        # (participant, reads) to send now: not with the group, since the reads are a
        # deterministic function of the input, and a re-send after a crash is identical
        self.outbox: list[tuple[int, Reads]] = []
        # Reads received for batches not started yet: (stream, batch) -> sender -> part ->
        # (reads, exchange offset); their offsets hold the exchange position back.
        self._inbox: dict[tuple[str, int], dict[int, dict[int, tuple[Reads, int]]]] = {}
        self._exchange: tuple[str, int] | None = None  # the exchange (topic, partition)
        self._exchange_next = 0
        # spanning topic -> the offset its input must be read to before per-partition
        # input is taken again (after a restart)
        self._behind: dict[str, int] = {}
        self.epochs = EpochReads()
        procedures = dataflow.decl.procedures.values()
        self._epochs = any(dataflow.isolation(p.name)[0].epochs for p in procedures)
        self.loaded = False

    def load(self) -> None:
        """Take the epoch values the state keeps (below PL3), once the base is caught up
        with its changelog: a batch re-run after a restart must send the values it sent
        before the crash, and a store behind its changelog may not hold them yet."""
        if self._epochs:
            self.epochs.load(self.ledger.group.ws, self.ledger.base)
        self.loaded = True

    def holds(self, spanning: bool, stream: str | None = None) -> bool:
        """Whether input of this kind must wait: a spanning batch while the queue, or the
        batches of its own `stream` waiting to join it, are full, or per-partition work is
        not committed; anything else while a spanning batch is queued or waiting, or the
        spanning input is still behind its end at the restart. (A stream waits only on its
        own backlog: another's batches may be what the backlog waits for.)"""
        if spanning:
            waiting = len(self._arrived[stream]) if stream in self._arrived else 0
            full = len(self.queue) >= MAX_QUEUED or waiting >= MAX_QUEUED
            return full or self.ledger.local_uncommitted
        return bool(self.queue or self._behind or self._waiting)

    @property
    def _waiting(self) -> bool:
        """Batches are taken in that wait for another spanning stream (`_admit`)."""
        return any(self._arrived.values())

    @property
    def idle(self) -> bool:
        """No spanning batch is queued or waiting: an input position may move on at once."""
        return not self.queue and not self._waiting

    def reading(self, ws: WriteSet) -> bool:
        """Whether a batch queued here declares a row `ws` writes (its reads went out, or
        will when it starts), or may once the spanning input is caught up after a start
        (its reads may have gone out before the crash): the row must not change before."""
        if self._behind or self._waiting:
            return True
        return any((table, key) in self._locks for table, rows in ws.tables.items() for key in rows)

    def catch_up(self, topic: str, end: int) -> None:
        """At the start: per-partition input waits until spanning `topic` is read to `end`,
        its committed end now (any batch whose reads went out before a crash is below it)."""
        if end > self.ledger.position(topic):
            self._behind[topic] = end

    @property
    def catching_up(self) -> bool:
        """Per-partition input waits for the spanning input to reach its end at the start."""
        return bool(self._behind)

    def reached(self, topic: str, end: int) -> None:
        """Spanning `topic` is read up to `end` (a record before it taken, or its end seen
        with nothing of it left waiting)."""
        caught_up = self._behind.get(topic, end) <= end
        if caught_up and self._behind.pop(topic, None) is not None and not self._behind:
            self.released()

    def process(
        self,
        stream: str,
        batch_id: int,
        tuples: Sequence[Record],
        source: Source | None,
        record: bytes | None,
    ) -> None:
        """Take in the next batch of a spanning stream: it joins the queue in its place in
        the global order (`_admit`), and the queue moves on."""
        if not self.loaded:
            raise RuntimeError(
                "a spanning batch before SpanRunner.load(): below PL3 it would read the "
                "store as it stands instead of the epoch values kept (load after restore)"
            )
        ledger = self.ledger
        (proc,) = self.dataflow.consumers[stream]
        touches = self.dataflow.touches(proc.name)
        assert touches is not None
        entry = _Entry(proc, batch_id, tuples, source, record, None)
        level, size = self.dataflow.isolation(proc.name)
        if level.epochs:
            entry.epoch = batch_id // size
        try:
            entry.plan = SpanPlan.of(touches, tuples, self.owner)
        except Exception as e:  # every engine fails alike; engine 0 speaks for them
            if ledger.partition == 0:
                detail = exception_detail(e)
                entry.aborts.append(AbortRecord(proc.name, stream, batch_id, "bad_touches", detail))
            entry.state = _State.DONE
        else:
            if ledger.partition not in entry.plan.participants:
                entry.state = _State.DONE
            entry.local = frozenset(entry.plan.local(ledger.partition))
        self._take_in(stream, entry)

    def _take_in(self, stream: str, entry: _Entry) -> None:
        entry.taken_at = time.monotonic()
        self._by_id[(stream, entry.batch_id)] = entry
        self._tail[stream] = entry.batch_id
        self._arrived[stream].append(entry)
        self._admit()
        self._run_ready()

    def _admit(self) -> None:
        """Queue the batches taken in, in one global order for every spanning stream: by
        batch id, then by stream name. A batch joins once no other spanning stream can
        still bring one before it here: each has come past its id (a batch or a progress
        mark of that id or above; of the id before, for a stream ordered after it). Every
        engine so queues the batches it shares with another in the same order, and each
        takes its keys' locks in that order, so none waits for another in a cycle (as in
        Calvin). With one spanning stream a batch joins at once."""
        arrived, rank = self._arrived, self._rank
        while True:
            heads = [(q[0].batch_id, rank[s], s) for s, q in arrived.items() if q]
            if not heads:
                return
            batch_id, mine, stream = min(heads)
            for other, theirs in rank.items():
                if other != stream and not self._past(other, theirs, batch_id, mine):
                    return  # a batch of `other` may still come before this one
            self._enqueue(arrived[stream].popleft())

    def oldest_unadmitted(self) -> tuple[str, int, list[str], float] | None:
        """The next batch to join the queue, if one waits for other spanning streams:
        (its stream, its id, the streams not yet past it, seconds since it came). One that
        waits long means a spanning stream's producer does not mark its progress."""
        heads = [(q[0].batch_id, self._rank[s], s) for s, q in self._arrived.items() if q]
        if not heads:
            return None
        batch_id, mine, stream = min(heads)
        behind = [o for o, theirs in self._rank.items() if o != stream and not self._past(
            o, theirs, batch_id, mine)]  # fmt: skip
        entry = self._arrived[stream][0]
        return stream, batch_id, behind, time.monotonic() - entry.taken_at

    def _past(self, other: str, theirs: int, batch_id: int, mine: int) -> bool:
        """Whether spanning stream `other` (ranked `theirs`) can bring nothing more that
        comes before batch `batch_id` of the stream ranked `mine`."""
        past = self._come_to(other)
        return past >= batch_id or (past == batch_id - 1 and theirs > mine)

    def _come_to(self, stream: str) -> int:
        """The highest batch id `stream` has brought here (a batch or a mark), 0 if none."""
        taken = self._tail.get(stream)
        if taken is not None:
            return taken
        return self.ledger.sys_value(last_batch_key(stream, self.ledger.partition)) or 0

    def _enqueue(self, entry: _Entry) -> None:
        self.queue.append(entry)
        if entry.state is _State.QUEUED:
            for key in entry.local:
                self._locks.setdefault(key, deque()).append(entry)
            if self._free(entry):
                self._start(entry)

    def passed(self, stream: str, batch_id: int, source: Source | None) -> None:
        """A producer's progress mark: every batch of `stream` up to `batch_id` that
        touches this engine has come. It completes in its place, after the batches queued
        before it (`BatchLedger.passed`)."""
        (proc,) = self.dataflow.consumers[stream]
        entry = _Entry(proc, batch_id, (), source, None, None, state=_State.DONE, mark=True)
        self._take_in(stream, entry)

    def last_queued(self, stream: str) -> int | None:
        """The highest batch id of `stream` taken in (queued or waiting), if any is."""
        return self._tail.get(stream)

    def repeat(self, stream: str, batch_id: int, record: bytes | None) -> bool:
        """A batch id already queued: True for an exact re-send of that batch (skipped);
        False otherwise, for the caller to dead-letter."""
        entry = self._by_id.get((stream, batch_id))
        if entry is not None and record is not None and entry.record == record:
            self.ledger.resent(stream)
            return True
        return False

    def receive(self, reads: Reads, source: Source) -> None:
        """Another participant's reads (or a part of them); a repeat, and reads for a batch
        taken in already, are dropped."""
        topic, part, offset = source
        self._exchange = (topic, part)
        self._exchange_next = max(self._exchange_next, offset + 1)
        key = (reads.stream, reads.batch_id)
        entry = self._by_id.get(key)
        if entry is None:
            last = self.ledger.sys_value(last_batch_key(reads.stream, self.ledger.partition))
            if last is not None and reads.batch_id <= last:
                return  # a batch done here: a re-send after the sender's restart
        elif entry.state is not _State.QUEUED and reads.sender not in entry.missing:
            return  # taken in already
        senders = self._inbox.setdefault(key, {})
        senders.setdefault(reads.sender, {}).setdefault(reads.part, (reads, offset))
        if entry is not None and entry.state is _State.SENT:
            self._take(entry)
            self._run_ready()

    def settle(self) -> None:
        """Record the exchange position a restart must read from: the oldest record still
        needed (for a batch not completed), else past the last one read."""
        if self._exchange is None:
            return
        held = [o for senders in self._inbox.values() for parts in senders.values()
                for _, o in parts.values()]  # fmt: skip
        held += [o for e in self.queue for o in e.offsets]
        topic, part = self._exchange
        self.ledger.set_sys(position_key(topic, part), min(held, default=self._exchange_next))

    def oldest_wait(self) -> tuple[int, list[int], float] | None:
        """The batch at the head, if it is waiting for reads: (batch id, the engines it
        waits for, seconds since its own reads went out). A batch that waits long means an
        engine is down or never got the batch (its producer placed it on too few
        partitions)."""
        head = self.queue[0] if self.queue else None
        if head is None or head.state is not _State.SENT or not head.missing:
            return None
        return head.batch_id, sorted(head.missing), time.monotonic() - head.started

    def _run_ready(self) -> None:
        """Run the head while it has every reads, and complete what ran, in batch order."""
        queue = self.queue
        while queue:
            head = queue[0]
            if head.state is _State.SENT and not head.missing:
                self._run(head)
            if head.state is not _State.DONE:
                return
            self._finish(queue.popleft())

    def _free(self, e: _Entry) -> bool:
        """Whether `e` may send its reads: it heads each of its keys' queues, or (below
        PL3) only batches of its own epoch are ahead of it there."""
        for key in e.local:
            for ahead in self._locks[key]:
                if ahead is e:
                    break
                if e.epoch is None or ahead.epoch != e.epoch:
                    return False
        return True

    def _start(self, e: _Entry) -> None:
        ledger, me = self.ledger, self.ledger.partition
        assert e.plan is not None
        if e.epoch is None:
            e.rows = local_reads(e.plan, me, ledger.group.ws, ledger.base)
        else:
            ws, stream = ledger.group.ws, e.proc.input
            e.rows = {
                (t, k): self.epochs.read(stream, e.epoch, t, k, ws, ledger.base)
                for t, k in e.plan.local(me)
            }
        e.missing = set(e.plan.participants - {me})
        # one Reads for every receiver, of its own rows: the others' join `e.rows` later
        reads = Reads(e.proc.input, e.batch_id, me, dict(e.rows))
        for q in sorted(e.missing):
            self.outbox.append((q, reads))
        e.state = _State.SENT
        e.started = time.monotonic()
        self._take(e)

    def _take(self, e: _Entry) -> None:
        """Take in every sender's reads whose parts are all in."""
        senders = self._inbox.get((e.proc.input, e.batch_id), {})
        for sender in [s for s in senders if s in e.missing]:
            parts = senders[sender]
            if len(parts) < next(iter(parts.values()))[0].parts:
                continue
            for reads, offset in parts.values():
                e.rows.update(reads.rows)
                e.offsets.append(offset)
            e.missing.discard(sender)
            del senders[sender]
        if not senders:
            self._inbox.pop((e.proc.input, e.batch_id), None)

    def _run(self, e: _Entry) -> None:
        """Run the batch, then release its keys: each next batch waiting on them starts
        once it is free (`_free`)."""
        ledger, me, stream = self.ledger, self.ledger.partition, e.proc.input
        assert e.plan is not None
        epoch = e.epoch is not None
        base = SpanBase(e.plan, me, ledger.base, e.rows, epoch)
        span = Span(e.plan, base, me, e.plan.leader == me, epoch)
        if e.epoch is None:
            self.executor.run_span(e.proc, e.batch_id, e.tuples, span)
        else:
            ws = ledger.group.ws
            self.epochs.close_before(stream, e.epoch, ws)
            before = {(t, k): read(ws, ledger.base, t, k) for t, k in e.local}
            self.executor.run_span(e.proc, e.batch_id, e.tuples, span)
            self.epochs.keep(stream, e.epoch, before, ws, ledger.base)
        e.state = _State.DONE
        ledger.group.spans.append(SpanPart(stream, e.batch_id, tuple(sorted(e.plan.participants))))
        self._inbox.pop((stream, e.batch_id), None)
        for key in e.local:
            waiting = self._locks[key]
            waiting.popleft()  # runs go in batch order: it headed each of its keys' queues
            if not waiting:
                del self._locks[key]
                continue
            head = waiting[0]
            for nxt in waiting:  # the head, and below PL3 the rest of its epoch
                if nxt is not head and (head.epoch is None or nxt.epoch != head.epoch):
                    break
                if nxt.state is _State.QUEUED and self._free(nxt):
                    self._start(nxt)
        self.released()

    def _finish(self, e: _Entry) -> None:
        """The batch and every one before it are done: it completes, in batch order."""
        ledger, group, stream = self.ledger, self.ledger.group, e.proc.input
        del self._by_id[(stream, e.batch_id)]
        if self._tail.get(stream) == e.batch_id:
            del self._tail[stream]
        group.aborts += e.aborts
        if e.mark:
            ledger.passed(stream, e.batch_id)
        else:
            ledger.batch_done(stream, e.batch_id, e.record)
        ledger.advance(e.source)
