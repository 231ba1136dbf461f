"""What the engines of a committed run ran, read back from Kafka, for `txstream verify`.

Each commit notice names, in a header, what its group ran in order (`engine.group.BatchRun`):
border batches by id, OLTP records (requests, decisions, promises) by offset, a
repartitioned procedure's unordered parts by offset in its topic and its ordered batches by
id. The input topics hold those records. `ran_in_order` gives one partition's run back as
the reference replays it; the readers here take each record as its engine did (a record
without the stack's tag, or that does not decode, was dead-lettered and never ran).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from txstream.config import Settings
from txstream.engine.group import ORDER_HEADER, BatchRun, decode_order
from txstream.engine.hops import PROGRESS, Part
from txstream.engine.promises import promise_id
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Record
from txstream.oltp.messages import (
    ENDPOINT_REPLY,
    CoordinatorLog,
    Decision,
    EngineRequest,
    Message,
    Wire,
    WireDecodeError,
)
from txstream.oltp.origin import Origin, Unauthenticated
from txstream.schemas.codec import WRITER_HEADER, BatchCodec, BatchDecodeError
from txstream.schemas.registry import SchemaRegistry

# As an engine ran it: (stream, batch id, tuples), (OLTP topic, offset, its message), or
# (hop topic, offset or batch id, a `Hop`).
Ran = tuple[str, int, Any]


@dataclass(frozen=True)
class Hop:
    """What a repartitioned procedure ran on: a part, or an ordered batch's parts."""

    procedure: str
    batch_id: int
    tuples: list[Record]


@dataclass(frozen=True)
class HopInput:
    """A repartitioned procedure's topic, one partition of it: unordered parts by offset,
    or ordered batches by id, each its parts' tuples in sender order."""

    procedure: str
    ordered: bool
    runs: dict[int, Hop]


class Unverifiable(ValueError):
    """The app or its run has inputs verify cannot replay yet; nothing was compared."""


def coordinator_log(settings: Settings, topics: AppTopics, wire: Wire) -> Iterable[CoordinatorLog]:
    """The coordinator's log; a record without the stack's tag was skipped by it too."""
    for msg in read_to_committed_end(settings, topics.coordinator_log, 0):
        try:
            yield wire.decode(CoordinatorLog, msg.value() or b"")
        except (WireDecodeError, Unauthenticated):
            continue


def order_of(settings: Settings, topics: AppTopics, partition: int) -> list[BatchRun]:
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


def batches_of(
    settings: Settings,
    topic: str,
    partition: int,
    codec: BatchCodec,
    writers: dict[str, BatchCodec],
) -> dict[int, list[Record]]:
    """Batch id -> tuples, the first record of each id (a later one was a re-send or stale);
    a producer's progress mark is no batch, and ran nowhere."""
    out: dict[int, list[Record]] = {}
    for msg in read_to_committed_end(settings, topic, partition):
        try:
            batch = codec.decode(msg.value() or b"", _writer(msg, codec, writers))
        except BatchDecodeError:
            continue  # dead-lettered by the engine, never run: not in the order either
        if batch.stream != PROGRESS:
            out.setdefault(batch.batch_id, batch.tuples)
    return out


def _writer(msg: Any, codec: BatchCodec, writers: dict[str, BatchCodec]) -> BatchCodec | None:
    """The codec of the schema a record was written with, if not `codec`'s own."""
    fingerprint = dict(msg.headers() or []).get(WRITER_HEADER)
    if isinstance(fingerprint, bytes):
        fingerprint = fingerprint.decode()
    return writers.get(fingerprint or "") if fingerprint != codec.fingerprint else None


def wire_of(settings: Settings, registry: SchemaRegistry) -> Wire:
    """The services' wire: OLTP records without the stack's tag were dead-lettered."""
    try:
        origin = Origin.of(settings, create=False)
    except ValueError as e:
        raise Unverifiable(f"{e}: without it, no decision could be told from a forgery") from e
    return Wire(registry, origin)


def by_offset(app: App) -> set[str]:
    """The topics whose records the order names by offset: OLTP input, unordered hops."""
    topics = AppTopics(app.name)
    df = app.dataflow()
    hops = {topics.hop(h) for h in df.hops if not df.decl.procedures[h].ordered}
    return set(oltp_topics(app, topics)) | hops


def oltp_topics(app: App, topics: AppTopics) -> tuple[str, ...]:
    if app.decl.transactions:
        return (topics.requests, topics.decisions, topics.promises)
    return (topics.requests,) if app.decl.serves_requests else ()


def oltp_records(settings: Settings, topic: str, partition: int, wire: Wire) -> dict[int, Message]:
    """Offset -> the request, promise or decision there; a record that does not decode was
    dead-lettered by the engine, and is not in its order either."""
    kind: type[Message] = Decision if topic.endswith(".decisions") else EngineRequest
    promises = topic.endswith(".promises")
    out: dict[int, Message] = {}
    for msg in read_to_committed_end(settings, topic, partition):
        try:
            message = wire.decode(kind, msg.value() or b"", promises=promises)
        except (WireDecodeError, Unauthenticated):
            continue
        offset = msg.offset() or 0
        if promises and isinstance(message, EngineRequest):  # named as the engine names it
            message = replace(message, txn_id=promise_id(partition, offset))
        out[offset] = message
    return out


def check_no_endpoint_calls(order: list[BatchRun], partition: int) -> None:
    """A direct transaction sent to a worker's endpoint leaves no input record: a partition
    that ran one cannot be replayed (the order names that it did)."""
    if any(run.stream == ENDPOINT_REPLY for run in order):
        raise Unverifiable(
            f"partition {partition} ran direct transactions sent to a worker's endpoint "
            "(TxClient direct_via='endpoint'), which leave no input record to replay: "
            "verify a run whose clients sent them through Kafka"
        )


def check_named(order: list[BatchRun], oltp: dict[str, dict[int, Any]], partition: int) -> None:
    """An engine that handled OLTP records names them in its order (since verify replays
    them); a run whose order names none while a topic holds some was committed by an older
    engine, and its replay would differ from it everywhere OLTP wrote."""
    if any(run.stream in oltp for run in order):
        return
    held = {t: len(r) for t, r in oltp.items() if r}
    if held:
        raise Unverifiable(
            f"partition {partition}: the engines' commit notices name no OLTP records, but "
            f"{', '.join(f'{t} holds {n}' for t, n in held.items())}: the run was committed "
            "by an engine older than verify's replay of OLTP input; verify a run made since"
        )


def hop_input_of(
    settings: Settings,
    dataflow: Dataflow,
    topics: AppTopics,
    procedure: str,
    partition: int,
    registry: SchemaRegistry,
    writers: dict[str, BatchCodec],
) -> HopInput:
    """One partition of `procedure`'s topic, as `hop_input` gives it out."""
    proc = dataflow.decl.procedures[procedure]
    codec = BatchCodec(registry.get(dataflow.decl.streams[proc.input].schema))
    parts: list[Part] = []
    for msg in read_to_committed_end(settings, topics.hop(procedure), partition):
        try:
            batch = codec.decode(msg.value() or b"", _writer(msg, codec, writers))
            sender = int(msg.key() or b"")
        except (BatchDecodeError, ValueError):
            continue  # dead-lettered by the engine, never run
        parts.append(Part(batch.batch_id, sender, msg.offset() or 0, batch.tuples))
    return hop_input(procedure, proc.ordered, parts)


def hop_input(procedure: str, ordered: bool, parts: Iterable[Part]) -> HopInput:
    """A hop topic's parts as its engine runs them: unordered, each by its offset; ordered,
    each batch by its id, its senders' parts together in sender order. Progress marks (no
    tuples) run nothing."""
    parts = [p for p in parts if p.tuples]
    if not ordered:
        runs = {p.offset: Hop(procedure, p.batch_id, list(p.tuples)) for p in parts}
        return HopInput(procedure, False, runs)
    runs = {}
    for p in sorted(parts):
        runs.setdefault(p.batch_id, Hop(procedure, p.batch_id, [])).tuples.extend(p.tuples)
    return HopInput(procedure, True, runs)


def ran_in_order(
    order: Iterable[BatchRun],
    inputs: dict[str, dict[int, Any]],
    oltp: dict[str, dict[int, Any]],
    hops: dict[str, HopInput] | None = None,
) -> Iterable[Ran]:
    for run in order:
        hop = (hops or {}).get(run.stream)
        if hop is not None:
            for n in range(run.first, run.last + 1):
                if n in hop.runs:
                    yield run.stream, n, hop.runs[n]
                elif not hop.ordered:  # every offset of a run of parts ran a part
                    raise Unverifiable(f"{run.stream} offset {n} ran a part of "
                                       f"{hop.procedure!r} and cannot be read now")  # fmt: skip
            continue
        records = oltp.get(run.stream)
        if records is not None:
            for offset in range(run.first, run.last + 1):
                if offset not in records:
                    raise Unverifiable(f"{run.stream} offset {offset} was handled by the "
                                       "engine and cannot be read now (retention?)")  # fmt: skip
                message = records[offset]
                if not (isinstance(message, EngineRequest) and message.kind == "read"):
                    yield run.stream, offset, message
            continue
        if run.stream not in inputs:
            raise Unverifiable(f"the engines ran batches of {run.stream!r}, not a border stream")
        batches = inputs[run.stream]
        ids = [i for i in batches if run.first <= i <= run.last]
        for batch_id in sorted(ids):
            yield run.stream, batch_id, batches[batch_id]
