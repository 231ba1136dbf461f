"""Rebuild an engine's state by replaying its command log from the state's log offset.

Strong: each logged TE runs again with PE triggers off, in commit order; a border TE reads
its batch from the input topic, an interior TE takes the batch its upstream TE just
recomputed. When the log ends, triggers come back on and fire for any batch still pending.
Weak: each logged border batch runs again with triggers on, recomputing the interior.
Either way the outputs are dropped (Kafka already holds them) and the state is applied to
RocksDB every `apply_every` log records, with the log offset reached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from txstream.config import Settings
from txstream.engine.group import OLTP_STREAM, JournalEntry, batch_digest
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.read import read_to_committed_end
from txstream.model.declarations import RecoveryMode
from txstream.recovery.command_log import CommandLogCodec
from txstream.recovery.sources import RecoveryError
from txstream.schemas.codec import Batch
from txstream.state.codec import StateCodec
from txstream.state.committed import CommittedState

Done = set[tuple[str, str, int]]


class Sources(Protocol):
    def get(self, topic: str, offset: int) -> Batch: ...

    def raw(self, topic: str, offset: int) -> bytes: ...


OltpHandler = Callable[[str, int, bytes], None]  # (topic, offset, record value): apply again


def _no_oltp(topic: str, offset: int, value: bytes) -> None:
    raise RecoveryError(f"the log names a coordinator message on {topic}, but no handler")


def replay(
    engine: PartitionEngine,
    state: CommittedState,
    codec: StateCodec,
    log_codec: CommandLogCodec,
    sources: Sources,
    settings: Settings,
    log_topic: str,
    *,
    apply_every: int = 2_000,
    progress: Callable[[int], None] | None = None,
    oltp: OltpHandler = _no_oltp,
) -> int:
    """Replay `log_topic[partition]` from where the state stands; returns the records read."""
    partition, start = engine.partition, state.log_offset()
    first = TopicAdmin(settings).start_offset(log_topic, partition)
    if first > start:
        raise RecoveryError(
            f"state of {log_topic}[{partition}] stands at offset {start}, but the log was "
            f"truncated to start at {first}: the snapshot it was truncated for is missing"
        )
    strong = log_codec.mode is RecoveryMode.STRONG
    engine.executor.begin_replay(strong)
    done: Done = set()
    count, next_offset = 0, start
    try:
        for msg in read_to_committed_end(settings, log_topic, partition, start):
            record = log_codec.decode(msg.value() or b"")
            replay_entries(engine, record.entries, sources, done if strong else None, oltp)
            for topic, offset in record.positions.items():
                if offset != engine.position(topic):  # a topic never read stays unrecorded
                    engine.set_position(topic, offset)
            count, next_offset = count + 1, (msg.offset() or 0) + 1
            if count % apply_every == 0:
                state.apply(codec.encode_writes(engine.take_group().ws), next_offset)
                if progress is not None:
                    progress(count)
        state.apply(codec.encode_writes(engine.take_group().ws), next_offset)
    finally:
        engine.executor.end_replay()
    if strong:
        engine.executor.fire_pending(done)
    return count


def replay_entries(
    engine: PartitionEngine,
    entries: Sequence[JournalEntry],
    sources: Sources,
    done: Done | None,
    oltp: OltpHandler = _no_oltp,
) -> None:
    """Run one log record's entries: strong (PE triggers off) when `done` tracks the
    consumed interior batches, weak (triggers on) when it is None. OLTP requests and
    decisions run again the same way in both modes."""
    for entry in entries:
        if entry.stream == OLTP_STREAM:
            if entry.topic is None or entry.offset is None:
                raise RecoveryError("an OLTP log entry has no input offset")
            oltp(entry.topic, entry.offset, sources.raw(entry.topic, entry.offset))
        elif done is not None:
            _replay_strong(engine, sources, entry, done)
        else:
            _replay_weak(engine, sources, entry)
    if done is not None:
        engine.executor.forget_consumed(done)


def _replay_strong(
    engine: PartitionEngine, sources: Sources, entry: JournalEntry, done: Done
) -> None:
    if entry.procedure is None:
        raise RecoveryError(f"strong log entry for {entry.stream} names no procedure")
    digest = None
    if entry.topic is not None and entry.offset is not None:
        tuples = sources.get(entry.topic, entry.offset).tuples
        digest = batch_digest(sources.raw(entry.topic, entry.offset))
    else:
        found = engine.executor.pending_batch(entry.stream, entry.batch_id)
        if found is None and not entry.aborted:
            raise RecoveryError(
                f"log entry {entry.procedure} on {entry.stream} batch {entry.batch_id}: "
                "no replayed TE produced that batch"
            )
        tuples = list(found or ())
    engine.replay(entry, tuples, digest)
    if entry.topic is None:
        done.add((entry.procedure, entry.stream, entry.batch_id))


def _replay_weak(engine: PartitionEngine, sources: Sources, entry: JournalEntry) -> None:
    if entry.topic is None or entry.offset is None:
        raise RecoveryError(f"weak log entry for {entry.stream} has no input offset")
    batch = sources.get(entry.topic, entry.offset)
    record = sources.raw(entry.topic, entry.offset)
    engine.process(entry.stream, entry.batch_id, batch.tuples, record=record)
