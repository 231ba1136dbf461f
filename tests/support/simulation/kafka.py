"""An in-memory Kafka with the transactional semantics the commit protocol relies on.

Partition logs assign offsets on produce. A transaction's records stay invisible to
read_committed readers until its commit marker, and become invisible for good at an abort
marker; either marker takes an offset, as on a broker. `init_transactions` by a new
incarnation of a transactional id aborts what the old one left open and fences it. The last
stable offset (LSO) stops read_committed reads at the first record of an open transaction.
`compact` drops committed records shadowed by a later committed record with the same key
(tombstones stay), as log compaction of the changelog may.

A `Crash` planned at a step of the producer (`CrashPlan`) is raised there: the simulated
process dies mid-protocol, in the commit thread if that is where the step runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


class Crash(BaseException):
    """The simulated process dies here. A BaseException, so no `except Exception` in the
    code under test mistakes it for an error it could recover from."""


class Fenced(RuntimeError):
    """A zombie producer wrote after a newer incarnation of its transactional id started."""


@dataclass
class Entry:
    offset: int
    key: bytes | None
    value: bytes | None
    txn: int | None  # the transaction that wrote it; None for a plain (committed) write
    marker: bool = False


class Message:
    """What confluent-kafka's Message offers the code under test."""

    __slots__ = ("_entry", "_partition", "_topic")

    def __init__(self, topic: str, partition: int, entry: Entry) -> None:
        self._topic, self._partition, self._entry = topic, partition, entry

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def key(self) -> bytes | None:
        return self._entry.key

    def value(self) -> bytes | None:
        return self._entry.value

    def offset(self) -> int:
        return self._entry.offset

    def error(self) -> None:
        return None


@dataclass
class CrashPlan:
    """Die at the `nth` time the process reaches `point` (`nth` counts down as it goes)."""

    point: str
    nth: int

    def reached(self, point: str) -> None:
        if point == self.point:
            self.nth -= 1
            if self.nth == 0:
                raise Crash(point)


NO_CRASH = CrashPlan("", 0)


@dataclass
class MemoryKafka:
    logs: dict[tuple[str, int], list[Entry]] = field(default_factory=dict)
    status: dict[int, str] = field(default_factory=dict)  # txn -> open | committed | aborted
    epochs: dict[str, int] = field(default_factory=dict)  # transactional id -> epoch
    open_txn: dict[str, int] = field(default_factory=dict)  # transactional id -> open txn
    _next_txn: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def log(self, topic: str, partition: int) -> list[Entry]:
        return self.logs.setdefault((topic, partition), [])

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        txn: int | None = None,
        marker: bool = False,
    ) -> Entry:
        with self._lock:
            log = self.log(topic, partition)
            entry = Entry(log[-1].offset + 1 if log else 0, key, value, txn, marker)
            log.append(entry)
            return entry

    def visible(self, entry: Entry) -> bool:
        return not entry.marker and (entry.txn is None or self.status[entry.txn] == "committed")

    def read_committed(self, topic: str, partition: int, start: int = 0) -> Iterator[Message]:
        """Committed records from `start` up to the last stable offset, in offset order."""
        for entry in list(self.log(topic, partition)):
            if entry.txn is not None and self.status[entry.txn] == "open":
                return
            if entry.offset >= start and self.visible(entry):
                yield Message(topic, partition, entry)

    def values(self, topic: str, partition: int = 0) -> list[bytes | None]:
        return [m.value() for m in self.read_committed(topic, partition)]

    def end_transaction(self, txn: int, outcome: str, touched: set[tuple[str, int]]) -> None:
        """Write the markers and flip the status: every record of `txn` at once."""
        with self._lock:
            for topic, partition in sorted(touched):
                log = self.log(topic, partition)
                log.append(Entry(log[-1].offset + 1 if log else 0, None, None, txn, True))
            self.status[txn] = outcome

    def init_transactions(self, tid: str) -> int:
        """A new incarnation of `tid`: abort what the old one left open; fence it."""
        with self._lock:
            self.epochs[tid] = self.epochs.get(tid, 0) + 1
            txn = self.open_txn.pop(tid, None)
        if txn is not None:
            touched = {tp for tp, log in self.logs.items() for e in log if e.txn == txn}
            self.end_transaction(txn, "aborted", touched)
        return self.epochs[tid]

    def begin(self, tid: str) -> int:
        with self._lock:
            self._next_txn += 1
            self.status[self._next_txn] = "open"
            self.open_txn[tid] = self._next_txn
            return self._next_txn

    def compact(self, topic: str, partition: int) -> None:
        """Drop committed records below the LSO that a later committed record of the same
        key shadows, and aborted records; tombstones and markers stay."""
        log = self.log(topic, partition)
        is_open = [e.txn is not None and self.status[e.txn] == "open" for e in log]
        stable = is_open.index(True) if True in is_open else len(log)
        newest: dict[bytes | None, int] = {}
        for e in log[:stable]:
            if self.visible(e):
                newest[e.key] = e.offset
        self.logs[(topic, partition)] = [
            e
            for i, e in enumerate(log)
            if i >= stable
            or e.marker
            or (self.visible(e) and (e.value is None or newest[e.key] == e.offset))
        ]


class SimProducer:
    """A transactional producer over `MemoryKafka`, with confluent-kafka's method names.

    `committed` counts the transactions it committed: the simulation pairs them, in order,
    with the groups it sent, to learn which inputs are committed after a crash."""

    def __init__(self, kafka: MemoryKafka, tid: str, plan: CrashPlan) -> None:
        self.kafka = kafka
        self.tid = tid
        self.plan = plan
        self.epoch = 0
        self.committed = 0
        self._txn: int | None = None
        self._touched: set[tuple[str, int]] = set()
        self._pending: list[tuple[Callable[[Any, Message], None], Message]] = []

    def _alive(self, point: str) -> None:
        if self.kafka.epochs.get(self.tid) != self.epoch:
            raise Fenced(f"producer {self.tid} epoch {self.epoch} is fenced")
        self.plan.reached(point)

    def init_transactions(self, timeout: float | None = None) -> None:
        self.epoch = self.kafka.init_transactions(self.tid)

    def begin_transaction(self) -> None:
        self._alive("begin")
        self._txn = self.kafka.begin(self.tid)
        self._touched = set()
        self._pending = []

    def produce(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        partition: int = 0,
        on_delivery: Callable[[Any, Message], None] | None = None,
        **_: Any,
    ) -> None:
        self._alive("produce")
        if self._txn is None:
            raise RuntimeError("produce outside a transaction")
        entry = self.kafka.append(topic, partition, key, value, self._txn)
        self._touched.add((topic, partition))
        if on_delivery is not None:
            self._pending.append((on_delivery, Message(topic, partition, entry)))

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], partition: int) -> int:
        for m in messages:
            self.produce(topic, m.get("value"), m.get("key"), partition, m.get("callback"))
        return len(messages)

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> int:
        if self._txn is not None:
            self._alive("flush")
        pending, self._pending = self._pending, []
        for callback, msg in pending:
            callback(None, msg)
        return 0

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._alive("commit")
        if self._txn is None:
            raise RuntimeError("commit outside a transaction")
        self.kafka.end_transaction(self._txn, "committed", self._touched)
        self.kafka.open_txn.pop(self.tid, None)
        self._txn = None
        self.committed += 1
        self.plan.reached("committed")
