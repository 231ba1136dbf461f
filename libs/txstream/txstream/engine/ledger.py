"""A partition engine's batch ledger: the group in progress and what it records of inputs.

The ledger owns the `CommitGroup` being filled until the commit path takes it, and the system
keys kept in it beside the user's state: each input's next offset, each stream's last batch
id and that batch's digest, so a redelivery is skipped and a stale batch dead-lettered.
It also keeps the order border batches and OLTP records ran in, for `txstream verify`.
Everything the engine's parts record about a group goes through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

from txstream.engine.group import (
    OLTP_STREAM,
    SYS_TABLE,
    AbortRecord,
    BatchRun,
    CommitGroup,
    Journal,
    JournalEntry,
    Outcome,
    Source,
    SysKey,
    batch_digest,
    digest_key,
    last_batch_key,
    position_key,
)
from txstream.engine.writeset import TOMBSTONE, Base, WriteSet, read
from txstream.oltp.messages import EngineReply, TxnResult


@final
class BatchLedger:
    def __init__(self, base: Base, partition: int) -> None:
        self.base = base
        self.partition = partition
        self.group = CommitGroup()
        self._local_in_flight = False  # the group taken in flight holds per-partition work
        # stream -> the record of its last batch in the group, whose digest `take` stores
        self._records: dict[str, bytes | None] = {}
        # stream -> told each batch id completed on it (serializable reads wait on them)
        self._watchers: dict[str, Callable[[int], None]] = {}

    # --- system keys ---------------------------------------------------------------------

    def sys_value(self, key: SysKey) -> int | None:
        row = read(self.group.ws, self.base, SYS_TABLE, key)
        return None if row is None else int(row["value"])

    def set_sys(self, key: SysKey, value: int) -> None:
        self.group.ws.put(SYS_TABLE, key, {"value": value})

    def position(self, topic: str) -> int:
        """The next offset to read on `topic` for this partition, as of the group."""
        return self.sys_value(position_key(topic, self.partition)) or 0

    def set_position(self, topic: str, next_offset: int) -> None:
        self.set_sys(position_key(topic, self.partition), next_offset)

    def advance(self, source: Source | None) -> None:
        """The input record at `source` is behind us: the next offset is the position,
        committed with the effects."""
        if source is not None:
            topic, part, offset = source
            self.set_sys(position_key(topic, part), offset + 1)

    # --- batches -------------------------------------------------------------------------

    def watch(self, stream: str, on_completed: Callable[[int], None]) -> None:
        """Tell `on_completed(batch_id)` of each batch completed on `stream`."""
        self._watchers[stream] = on_completed

    def batch_done(self, stream: str, batch_id: int, record: bytes | None) -> None:
        """Batch `batch_id` of `stream` is done here: the last one, its record's digest
        kept, counted in the group, and its watcher told."""
        group = self.group
        self.set_sys(last_batch_key(stream, self.partition), batch_id)
        self._records[stream] = record
        group.stats.batches += 1
        group.first_batch_ids.setdefault(stream, batch_id)
        group.last_batch_ids[stream] = batch_id
        self.ran(stream, batch_id, by_offset=False)
        watcher = self._watchers.get(stream)
        if watcher is not None:
            watcher(batch_id)

    def passed(self, stream: str, batch_id: int) -> None:
        """A producer's progress mark on `stream`: every batch up to `batch_id` meant for
        this partition has come. It counts as the last batch (a later one not above it is
        stale; the commit notice says how far), with no content to match a re-send against,
        and its watcher is told (cut queries waiting for a batch this engine never gets)."""
        group = self.group
        self.set_sys(last_batch_key(stream, self.partition), batch_id)
        self._records[stream] = None
        group.first_batch_ids.setdefault(stream, batch_id)
        group.last_batch_ids[stream] = batch_id
        watcher = self._watchers.get(stream)
        if watcher is not None:
            watcher(batch_id)

    def stale(self, stream: str, batch_id: int, last: int, record: bytes | None) -> Outcome:
        """A batch id not above `last`: a re-send of the last batch, or a dead letter."""
        group = self.group
        digest = None if record is None else batch_digest(record)
        if stream in self._records:
            held = self._records[stream]
            known = None if held is None else batch_digest(held)
        else:
            known = self.sys_value(digest_key(stream, self.partition))
        if batch_id == last and digest is not None and digest == known:
            self.resent(stream)
            return Outcome.DUPLICATE
        if batch_id < last:
            why = "batch ids must increase"
        elif digest is not None and known is not None:
            why = "its content differs from that batch's"
        else:
            why = "it cannot be checked against that batch's content"
        group.aborts.append(
            AbortRecord(
                "<input>",
                stream,
                batch_id,
                "stale_batch_id",
                f"batch id {batch_id} on stream {stream!r} partition {self.partition} is not "
                f"above the last batch id {last} processed there, and {why}: not processed",
            )
        )
        group.stats.stale[(stream, "dead_letter")] += 1
        return Outcome.STALE

    def resent(self, stream: str) -> None:
        """A batch skipped as an exact re-send of one already taken."""
        self.group.stats.stale[(stream, "resend")] += 1

    def reject(self, stream: str, source: Source, reason: str, error: str) -> None:
        """An input record that is not a batch at all: record why, and move past it."""
        self.group.aborts.append(AbortRecord("<input>", stream, -1, reason, error))
        self.advance(source)

    def journal_oltp(self, topic: str, offset: int, journal: Journal) -> None:
        """Log an OLTP record handled here (a request, decision or promise), by where to
        read it again: both recovery modes replay OLTP transactions, in the order they ran,
        and so does `txstream verify`, from the group's order (runs of offsets)."""
        if journal is not Journal.NONE:
            self.group.journal.append(JournalEntry(OLTP_STREAM, -1, None, topic, offset))
        self.ran(topic, offset, by_offset=True)

    def ran(self, source: str, n: int, by_offset: bool) -> None:
        """Record in the group's order that `source` ran here next: batch `n` of a stream
        (a run of one stream's batches holds every id between, which ran here), or the
        record at offset `n` of a topic (a run holds consecutive offsets)."""
        order = self.group.order
        last = order[-1] if order else None
        if last is not None and last.stream == source and (not by_offset or last.last == n - 1):
            last.last = n
        else:
            order.append(BatchRun(source, n, n))

    # --- OLTP ----------------------------------------------------------------------------

    def executed(self) -> None:
        """One more execution (a TE, or an OLTP transaction) in the group."""
        self.group.stats.executions += 1

    def oltp_aborted(self, procedure: str, reason: str) -> None:
        self.group.stats.oltp_aborts[(procedure, reason)] += 1

    def reply(self, reply: EngineReply, urgent: bool = False) -> None:
        """An OLTP reply, sent with the group; `urgent`: a 2PC vote or a promise that
        the coordinator waits on, so the group commits at the end of the run."""
        self.group.replies.append(reply)
        if urgent:
            self.group.flags.urgent = True

    def result(self, reply_to: str, result: TxnResult) -> None:
        """A direct transaction's result, sent to its client with the group."""
        self.group.results.append((reply_to, result))

    def local(self) -> None:
        """Per-partition work is in the group (spanning batches wait for its commit)."""
        self.group.flags.local = True

    @property
    def local_uncommitted(self) -> bool:
        """Per-partition work is in the group, or in the commit in flight."""
        return self.group.flags.local or self._local_in_flight

    # --- the group's life ----------------------------------------------------------------

    def take(self, in_flight: bool = False) -> CommitGroup:
        """Hand the group to the commit path and start a new one; each stream's last batch
        digest goes in as a system key. A group taken `in_flight` is not in the base yet:
        the new one reads through its writes until `committed` says they are."""
        group = self.group
        for stream, record in self._records.items():
            key = digest_key(stream, self.partition)
            if record is None:
                group.ws.put(SYS_TABLE, key, TOMBSTONE)
            else:
                group.ws.put(SYS_TABLE, key, {"value": batch_digest(record)})
        self._records.clear()
        self.group = CommitGroup(WriteSet(group.ws)) if in_flight else CommitGroup()
        self._local_in_flight = in_flight and group.flags.local
        return group

    def committed(self) -> None:
        """The group taken last is in the base store: stop reading through it."""
        self.group.ws.detach()
        self._local_in_flight = False
