"""`txstream verify`: an app's committed run, replayed through the serial reference.

Every commit notice says, in a header, which border batches its group ran and in which order
(`engine.group.BatchRun`); the input topics hold those batches. Each partition's are run
again, in that order, through the app's own declarations on an in-memory engine
(`AppTester`, the same procedures, windows and triggers, one batch at a time); its tables
must equal what that partition's engine committed, as the changelog holds it. The first key
that differs is named, with both rows and the reference batch that last wrote it; else the
run is equal. Nobody else has this: it is the user's proof on their own data.

Scope: border stream batches and changelog recovery (the default). An app with OLTP
transactions, repartitioned edges or spanning procedures is refused, naming them: their
inputs (requests, hop and exchange records) are not replayed yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from txstream.config import Settings
from txstream.engine.group import ORDER_HEADER, BatchRun, decode_order
from txstream.kafka.published_schemas import published
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.declarations import Key, Record, RecoveryMode
from txstream.recovery.changelog import partition_tables
from txstream.schemas.codec import WRITER_HEADER, BatchCodec, BatchDecodeError
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing import AppTester


class Unverifiable(ValueError):
    """The app or its run has inputs verify cannot replay yet; nothing was compared."""


@dataclass(frozen=True)
class Divergence:
    partition: int
    table: str
    key: Key
    committed: Record | None  # what the engine committed (None: no row)
    reference: Record | None  # what the serial reference computed
    last_write: tuple[str, int] | None  # (stream, batch id): the reference's last write to it

    def text(self) -> str:
        where = f"partition {self.partition}, table {self.table!r}, key {list(self.key)!r}"
        by = (
            f"; the reference last wrote it in batch {self.last_write[1]} of stream "
            f"{self.last_write[0]!r}"
            if self.last_write
            else "; the reference never wrote it"
        )
        return (
            f"diverges at {where}: committed {self.committed!r}, reference {self.reference!r}{by}"
        )


@dataclass(frozen=True)
class Verdict:
    partitions: int
    batches: int
    divergence: Divergence | None

    @property
    def equal(self) -> bool:
        return self.divergence is None


def verify(
    settings: Settings,
    app: App,
    partitions: int,
    progress: Callable[[int, int], None] = lambda partition, batches: None,
) -> Verdict:
    """Replay every partition; the first divergence found, in partition and key order."""
    refuse(app)
    topics = AppTopics(app.name)
    registry = SchemaRegistry(settings.schema_dir)
    dataflow = app.dataflow()
    codecs = {s: BatchCodec(registry.get(dataflow.decl.streams[s].schema))
              for s in dataflow.border_streams}  # fmt: skip
    writers = {p.fingerprint: BatchCodec(p.schema) for p in published(settings, topics)}
    state_codec = StateCodec(dataflow, registry)
    total = 0
    for p in range(partitions):
        order = _order(settings, topics, p)
        inputs = {s: _batches(settings, topics.stream(s), p, codec, writers)
                  for s, codec in codecs.items()}  # fmt: skip
        ran = list(_ran(order, inputs))
        reference = _replay(app, settings, ran)
        total += len(ran)
        progress(p, len(ran))
        committed = partition_tables(settings, state_codec, topics.changelog, p)
        for table in sorted(dataflow.decl.tables):
            mine, theirs = committed.get(table, {}), reference.table(table)
            for key in sorted(mine.keys() | theirs.keys(), key=repr):
                if mine.get(key) != theirs.get(key):
                    last = _last_write(app, settings, ran, table, key)
                    divergence = Divergence(p, table, key, mine.get(key), theirs.get(key), last)
                    return Verdict(partitions, total, divergence)
    return Verdict(partitions, total, None)


def refuse(app: App) -> None:
    df = app.dataflow()
    missing = []
    if app.decl.transactions:
        missing.append(f"OLTP transactions ({', '.join(sorted(app.decl.transactions))})")
    if df.hops:
        missing.append(f"repartitioned edges ({', '.join(df.hops)})")
    if df.spanning_streams:
        missing.append(f"spanning procedures on {', '.join(df.spanning_streams)}")
    if app.recovery is not RecoveryMode.CHANGELOG:
        missing.append(f"{app.recovery} recovery (no changelog to compare with)")
    if missing:
        raise Unverifiable(f"app {app.name!r} has inputs verify cannot replay yet: "
                           f"{'; '.join(missing)}")  # fmt: skip


def _order(settings: Settings, topics: AppTopics, partition: int) -> list[BatchRun]:
    runs: list[BatchRun] = []
    for msg in read_to_committed_end(settings, topics.commits, partition):
        headers = dict(msg.headers() or [])
        data = headers.get(ORDER_HEADER)
        if data is None:
            raise Unverifiable(
                f"{topics.commits} partition {partition} offset {msg.offset()} has no batch "
                "order: written by an engine older than verify"
            )
        runs += decode_order(data.encode() if isinstance(data, str) else data)
    return runs


def _batches(
    settings: Settings,
    topic: str,
    partition: int,
    codec: BatchCodec,
    writers: dict[str, BatchCodec],
) -> dict[int, list[Record]]:
    """Batch id -> tuples, the first record of each id (a later one was a re-send or stale)."""
    out: dict[int, list[Record]] = {}
    for msg in read_to_committed_end(settings, topic, partition):
        fingerprint = dict(msg.headers() or []).get(WRITER_HEADER)
        if isinstance(fingerprint, bytes):
            fingerprint = fingerprint.decode()
        writer = writers.get(fingerprint or "") if fingerprint != codec.fingerprint else None
        try:
            batch = codec.decode(msg.value() or b"", writer)
        except BatchDecodeError:
            continue  # dead-lettered by the engine, never run: not in the order either
        out.setdefault(batch.batch_id, batch.tuples)
    return out


def _ran(
    order: Iterable[BatchRun], inputs: dict[str, dict[int, list[Record]]]
) -> Iterable[tuple[str, int, list[Record]]]:
    for run in order:
        if run.stream not in inputs:
            raise Unverifiable(f"the engines ran batches of {run.stream!r}, not a border stream")
        batches = inputs[run.stream]
        ids = [i for i in batches if run.first <= i <= run.last]
        for batch_id in sorted(ids):
            yield run.stream, batch_id, batches[batch_id]


def _replay(
    app: App, settings: Settings, ran: Iterable[tuple[str, int, list[Record]]]
) -> AppTester:
    tester = AppTester(app, schema_dir=settings.schema_dir)
    for stream, batch_id, tuples in ran:
        tester.feed(stream, tuples, batch_id)
    return tester


def _last_write(
    app: App, settings: Settings, ran: list[tuple[str, int, list[Record]]], table: str, key: Key
) -> tuple[str, int] | None:
    """Replay once more, watching one row: the batch after which it last changed."""
    tester = AppTester(app, schema_dir=settings.schema_dir)
    last, before = None, None
    for stream, batch_id, tuples in ran:
        tester.feed(stream, tuples, batch_id)
        now: Any = tester.state.get(table, key)
        if now != before:
            last, before = (stream, batch_id), now
    return last
