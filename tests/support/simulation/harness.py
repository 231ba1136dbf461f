"""A seeded, deterministic simulation of one partition task: processing, group commit,
crashes at every step of the commit sequence, and recovery, against a serial reference.

Real code driven, unchanged: `PartitionTask` (`open`, `handle` with its redelivery filter
and batch decoding, `start_commit`/`finish_commit` with one pipelined commit in flight on
the commit thread, `positions`, `tables`), `PartitionEngine`, `GroupCommitter` (the whole
produce, flush, commit, then apply sequence), `StateCodec`, `CommittedState` with its
caches, and `recovery.changelog.restore`.

Abstracted: the broker is `MemoryKafka` (offsets, transactions, markers, fencing by
init_transactions, read_committed up to the last stable offset, compaction), the producer
is `SimProducer`, and RocksDB is `MemoryStore` (an apply is atomic, and a crash loses the
applies since the last flush, as with the write-ahead log off). They are patched in where
`open` builds its producer and store and where `restore` reads the changelog. The
consumer is this scheduler: per input partition in offset order, topics interleaved at
random, stale redeliveries below the position mixed in, and after a crash (or a clean
handover: commit, `close`, reopen, as a rebalance ends in) from the positions `open`
returns. Commits start at random points, not on `CommitPolicy`'s clock. Not modelled:
Faust's side of a rebalance, a zombie still running beside its successor, snapshots,
command-log recovery, and OLTP/2PC (whose failpoints in `txstream.failpoints` kill real
processes, in tests/faults and the 2PC integration tests).

Crash points (`CrashPlan`): the n-th `begin`, `produce` (any record of a transaction),
`flush` or `commit` of the producer, just after a commit (`committed`, before the state
apply), a store `apply` or just after it (`applied`; in a commit's finish or during
restore), and between two input records (`process`, after the commit in flight ends).
A crash in the commit thread surfaces in the task thread at the next `finish_commit`.

Per seed the invariant is: the committed inputs, taken in the order the committed groups
processed them, are every record of every input partition exactly once, in offset order;
run serially through the reference they give exactly the committed outputs (each batch
once, in order), abort records, tables and window; and a store rebuilt from the changelog
alone holds the same state.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from tests.support.simulation.app import Reference, build_app
from tests.support.simulation.kafka import (
    NO_CRASH,
    Crash,
    CrashPlan,
    MemoryKafka,
    Message,
    SimProducer,
)
from tests.support.simulation.store import MemoryStore
from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.engine.group import batch_digest
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.task import PartitionTask
from txstream.schemas.records import decode_record

PRODUCER_POINTS = ("begin", "produce", "flush", "commit", "committed")
STORE_POINTS = ("apply", "applied")
NO_SNAPSHOTS = RecoveryPolicy(snapshot_every_batches=0, snapshot_interval_s=0)


@dataclass(frozen=True)
class Input:
    topic: str
    offset: int
    stream: str
    batch_id: int
    tuples: list[dict[str, int]]
    value: bytes


class _Handoff(Exception):
    """The partition is handed over cleanly (a rebalance): the task commits and closes."""


@dataclass
class Simulation:
    seed: int
    settings: Settings
    rng: random.Random = field(init=False)
    crashes: list[str] = field(default_factory=list)  # the points that fired, in order
    handoffs: int = 0  # clean close-and-reopen handovers still to make

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.nested = self.rng.random() < 0.5
        self.app = build_app(self.nested)
        self.kafka = MemoryKafka()
        self.store = MemoryStore(self.rng, self.rng.choice((0.0, 0.3, 1.0)))
        self.committed: list[tuple[str, int]] = []  # (topic, offset) handled, committed
        self.task = self._task()
        self.inputs = self._write_inputs()
        self.ends = {t: len(self.kafka.log(t, 0)) for t in self.task.inputs.topics}

    def _task(self) -> PartitionTask:
        return PartitionTask(self.app, 0, self.settings, CommitPolicy(), NO_SNAPSHOTS)

    def _write_inputs(self) -> dict[tuple[str, int], Input]:
        """Each border partition's batches, as a client writes them: ids going up, with
        exact re-sends of a record and now and then a stale id among them."""
        out: dict[tuple[str, int], Input] = {}
        for topic, stream in self.task.inputs.streams.items():
            codec = self.task.batch_codecs[stream]
            batch_id = 0
            for _ in range(self.rng.randint(1, 10)):
                batch_id += self.rng.randint(1, 2)
                sends = [(batch_id, self._tuples())] * self.rng.choice((1, 1, 1, 2))
                if self.rng.random() < 0.1:  # an old id again, with whatever content
                    sends.append((self.rng.randint(1, batch_id), self._tuples()))
                for bid, tuples in sends:
                    value = codec.encode(stream, bid, tuples)
                    entry = self.kafka.append(topic, 0, None, value)
                    out[(topic, entry.offset)] = Input(
                        topic, entry.offset, stream, bid, tuples, value
                    )
        return out

    def _tuples(self) -> list[dict[str, int]]:
        n = self.rng.randint(0, 3)
        return [{"key": self.rng.randint(0, 5), "value": self.rng.randint(0, 40)} for _ in range(n)]

    # --- running ------------------------------------------------------------------------

    def run(self) -> None:
        budget, self.handoffs = self.rng.randint(0, 5), self.rng.randint(0, 2)
        while True:
            plan = self._plan() if budget else NO_CRASH
            try:
                self._incarnation(plan)
                return
            except _Handoff:
                self.handoffs -= 1
            except Crash as c:
                self.crashes.append(str(c))
                budget -= 1
                self.store.crash()
                if self.rng.random() < 0.1:
                    self.store.lose()

    def _plan(self) -> CrashPlan:
        point = self.rng.choice((*PRODUCER_POINTS, *STORE_POINTS, "process"))
        return CrashPlan(point, self.rng.randint(1, 12 if point in ("produce", "process") else 3))

    def _patches(self, producer: SimProducer) -> ExitStack:
        stack = ExitStack()
        stack.enter_context(mock.patch("txstream.runtime.task.Producer", lambda conf: producer))
        stack.enter_context(
            mock.patch(
                "txstream.recovery.changelog.read_to_committed_end", self._read_to_committed_end
            )
        )
        return stack

    def _read_to_committed_end(
        self, settings: Settings, topic: str, partition: int = 0, start: int = 0, **_: Any
    ) -> Iterator[Message]:
        return self.kafka.read_committed(topic, partition, start)

    def _open(self, plan: CrashPlan) -> tuple[PartitionTask, SimProducer, dict[str, int]]:
        task = self._task()
        producer = SimProducer(self.kafka, task.topics.transactional_id(0), plan)
        self.store.plan = plan
        task.partition_state._open_store = lambda: self.store  # type: ignore[method-assign]
        with self._patches(producer):
            positions = task.open()
        return task, producer, positions

    def _incarnation(self, plan: CrashPlan) -> None:
        self.task, producer, cursor = self._open(plan)
        task = self.task
        handled: list[tuple[str, int]] = []  # since the last send
        sent: list[list[tuple[str, int]]] = []  # each group sent, in order

        def commit_all() -> None:
            nonlocal handled
            if not task.engine.group.empty:
                task.finish_commit(wait=True)
                sent.append(handled)
                handled = []
            task.commit()

        try:
            while True:
                remaining = [t for t, end in self.ends.items() if cursor[t] < end]
                if not remaining:
                    break
                r = self.rng.random()
                if r < 0.2:
                    if not task.engine.group.empty:
                        task.finish_commit(wait=True)  # the task's own order, made explicit
                        sent.append(handled)
                        handled = []
                    task.start_commit()
                elif r < 0.25:
                    task.finish_commit(wait=True)
                elif r < 0.3:
                    self.kafka.compact(task.topics.changelog, 0)
                elif r < 0.35:
                    plan.reached("process")
                elif r < 0.36 and self.handoffs:  # a rebalance: commit, close, reopen
                    commit_all()
                    task.close()
                    raise _Handoff
                elif r < 0.42 and any(cursor.values()):
                    topic = self.rng.choice([t for t in cursor if cursor[t]])
                    offset = self.rng.randrange(cursor[topic])  # a stale redelivery
                    task.handle(topic, offset, self.inputs[(topic, offset)].value)
                    handled.append((topic, offset))
                else:
                    topic = self.rng.choice(remaining)
                    task.handle(topic, cursor[topic], self.inputs[(topic, cursor[topic])].value)
                    handled.append((topic, cursor[topic]))
                    cursor[topic] += 1
            commit_all()
        finally:
            task.pipeline.abandon()  # the process dies once its commit thread is done
            if producer.committed > len(sent):
                raise AssertionError(f"{producer.committed} commits for {len(sent)} groups sent")
            for group in sent[: producer.committed]:
                self.committed.extend(group)

    # --- checking -----------------------------------------------------------------------

    def reference(self) -> Reference:
        """The committed inputs, each once in offset order, run serially."""
        ref = Reference(self.nested)
        expect = dict.fromkeys(self.ends, 0)
        for topic, offset in self.committed:
            if offset < expect[topic]:
                continue  # a redelivery the task dropped
            if offset > expect[topic]:
                raise AssertionError(f"{topic} offset {offset} committed, {expect[topic]} never")
            expect[topic] += 1
            i = self.inputs[(topic, offset)]
            ref.process(i.stream, i.batch_id, i.tuples, batch_digest(i.value))
        if expect != self.ends:
            raise AssertionError(f"inputs committed up to {expect}, not all of {self.ends}")
        return ref

    def check(self) -> None:
        ref = self.reference()
        task, topics = self.task, self.task.topics
        for stream, batches in ref.outputs.items():
            codec = task.batch_codecs[stream]
            got = [codec.decode(v or b"") for v in self.kafka.values(topics.stream(stream))]
            assert [(b.batch_id, b.tuples) for b in got] == batches, f"outputs on {stream}"
        schema = task.registry.get("txstream.AbortRecord")
        aborts = [decode_record(schema, v or b"") for v in self.kafka.values(topics.aborts)]
        got_aborts = [(a["procedure"], a["stream"], a["batch_id"], a["reason"]) for a in aborts]
        assert got_aborts == ref.aborts, "abort records"
        assert task.positions() == self.ends, "input positions"
        expected = (ref.tables(), ref.state.staged, ref.state.visible)
        assert self._state(task) == expected, "committed state"
        self.store.lose()  # rebuild from the changelog alone
        rebuilt, _, _ = self._open(NO_CRASH)
        rebuilt.pipeline.abandon()
        assert self._state(rebuilt) == expected, "state rebuilt from the changelog"

    @staticmethod
    def _state(task: PartitionTask) -> tuple[dict[str, Any], list[Any], list[Any]]:
        tables = task.tables()
        user = {t: tables.get(t, {}) for t in ("totals", "last")}
        window = task.state.window("w")
        if window is None:
            return user, [], []
        return user, list(window.staged), list(window.visible)
