"""CommitGroup commit: one Kafka transaction per group of TEs, then RocksDB.

Steps 1-3 run on a commit thread of their own (`send`), so the engine goes on with the
next group while the broker acknowledges and commits this one; step 4 (`finish`) runs back
in the task's thread, which alone touches RocksDB. One commit is in flight at a time.

The order is the whole of exactly-once here:
  1. produce the group's commit notice, changelog records, aborts and output batches;
  2. flush, so every record is acknowledged before the commit is asked for;
  3. commit the Kafka transaction (input positions are in the recovery log records, so they
     commit atomically with the effects they produced);
  4. only then apply the same writes to RocksDB, with the recovery log offset reached.
A crash before 3 leaves nothing visible (the next incarnation's init_transactions aborts the
open transaction); a crash between 3 and 4 is repaired on restart, which replays the log
from the offset RocksDB last recorded.

The recovery log is the changelog (every state write), or under strong or weak recovery a
single command log record naming what ran (`recovery.command_log`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from fastavro.types import Schema

from txstream import failpoints
from txstream.commit.markers import commit_end
from txstream.engine.group import ORDER_HEADER, CommitGroup, encode_order
from txstream.kafka.clients import DeliveryLatch, delivery_failure, error_text, send, send_many
from txstream.kafka.topics import AppTopics
from txstream.oltp.messages import ENDPOINT_REPLY, Wire, reply_partition
from txstream.recovery.command_log import CommandLogCodec
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import encode_record
from txstream.state.codec import EncodedWrites, StateCodec
from txstream.state.committed import CommittedState


class CommitError(RuntimeError):
    """The group could not be committed; the engine must restart from committed state."""


class UnencodableState(CommitError):
    """A state write the changelog cannot take: a row that does not match its table's
    schema, or a record over the size limit. Found before the transaction begins, so
    nothing was sent; the restarted engine checks its TEs' records (`RecordLimit.checked`)
    until it is past this group, and the TE that wrote it aborts instead."""


# An abort's error text is for people: past this many characters it is cut, so that no
# exception message (a huge value in it, say) can make the abort record too large.
MAX_ERROR_CHARS = 4000


@dataclass(frozen=True)
class Sent:
    """A group whose Kafka transaction committed: the writes RocksDB must now receive."""

    writes: EncodedWrites
    next_log_offset: int  # -1 if the group wrote nothing to the recovery log


class GroupCommitter:
    def __init__(
        self,
        producer: Producer,
        topics: AppTopics,
        partition: int,
        codec: StateCodec,
        state: CommittedState,
        batch_codecs: Mapping[str, BatchCodec],
        abort_schema: Schema,
        notice_schema: Schema,
        log_codec: CommandLogCodec | None = None,
        wire: Wire | None = None,
        max_record_bytes: int | None = None,
        reply_partitions: int = 1,
    ) -> None:
        """`max_record_bytes`: the largest state record (key and value) the producer takes;
        `reply_partitions`: the client reply topic's, for direct transactions' answers."""
        self.reply_partitions = reply_partitions
        self.max_record_bytes = max_record_bytes
        self.producer = producer
        self.topics = topics
        self.partition = partition
        self.codec = codec
        self.state = state
        self.batch_codecs = batch_codecs
        self.abort_schema = abort_schema
        self.notice_schema = notice_schema
        self.log_codec = log_codec
        self.wire = wire
        self._last_log_offset = -1
        self._failures = DeliveryLatch()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"commit-p{partition}")

    def send(self, group: CommitGroup, positions: Mapping[str, int]) -> Future[Sent]:
        """Steps 1-3 on the commit thread for `group`, which leaves the inputs at
        `positions` (topic -> next offset). The caller must `finish` it before the next
        send, and must not change `group` meanwhile."""
        return self._thread.submit(self._transact, group, positions)

    def finish(self, sent: Future[Sent]) -> None:
        """Wait for a sent group, then 4.: only now flush its state to RocksDB, with the
        recovery log offset it reaches. Raises CommitError if the transaction failed."""
        done = sent.result()
        if done.next_log_offset >= 0:
            self.state.apply(done.writes, done.next_log_offset)

    def close(self) -> None:
        self._thread.shutdown(wait=True)

    def _transact(self, group: CommitGroup, positions: Mapping[str, int]) -> Sent:
        writes = self._encode_writes(group)
        self._last_log_offset = -1
        self._failures.reset()
        try:
            self.producer.begin_transaction()
            # 1. Produce outputs, the recovery log (with the input positions), replies,
            #    aborts and the commit notice, all inside the transaction.
            self._produce_all(group, writes, positions)
            # 2. Flush: every record acknowledged before the commit is asked for.
            self.producer.flush()
            if group.results:  # a direct transaction ran, and its answer is not out yet
                failpoints.hit("commit.before_direct_answer")
            if self._failures.errors:
                cause = error_text(delivery_failure(self.producer, self._failures.errors))
                raise CommitError(f"records were not acknowledged: {cause}")
            # 3. Commit: effects and input positions become visible together, or not at all.
            self.producer.commit_transaction()
        except CommitError:
            raise
        except Exception as e:
            raise CommitError(f"group commit failed: {e}") from e
        last = self._last_log_offset
        return Sent(writes, last + 1 if last >= 0 else -1)

    def _encode_writes(self, group: CommitGroup) -> EncodedWrites:
        try:
            writes = self.codec.encode_writes(group.ws)
        except Exception as e:
            raise UnencodableState(f"a state write does not match its schema: {e}") from e
        limit = self.max_record_bytes
        if limit is not None:
            for key, value in writes.items():
                size = len(key) + (0 if value is None else len(value))
                if size > limit:
                    table, k = self.codec.describe(key)
                    raise UnencodableState(f"state record {table} {k} is {size} > {limit} bytes")
        return writes

    def _produce_all(
        self, group: CommitGroup, writes: Mapping[bytes, bytes | None], positions: Mapping[str, int]
    ) -> None:
        """The few records first, then the outputs, one or more a batch. librdkafka adds a
        transaction's partitions to it by a request it sends 1 ms after the first record to
        any of them, and holds every record until that request is answered; partitions first
        written after it went out wait for one more. With the recovery log, notice, replies
        and aborts sent first, every partition is usually in the first request (1.05 a
        transaction against 1.41), answered while the outputs are still being produced
        (docs/performance-history.md, commit path)."""
        self._produce_notice(group)
        self._produce_log(group, writes, positions)
        if group.replies or group.results:
            if self.wire is None:
                raise CommitError("the group holds OLTP replies but the committer has no codec")
            for reply in group.replies:
                self._send(self.topics.replies, self.wire.encode(reply), partition=0)
            for reply_to, result in group.results:  # checked by the task (`reply_problem`)
                if reply_to == ENDPOINT_REPLY:  # answered on the endpoint once committed
                    continue
                part = reply_partition(result.request_id, self.reply_partitions)
                self._send(reply_to, self.wire.encode(result), partition=part)
        for a in group.aborts:
            record = {"app": self.topics.app, **asdict(a), "error": capped(a.error)}
            self._send(self.topics.aborts, encode_record(self.abort_schema, record),
                       partition=self.partition)  # fmt: skip
        self._produce_outputs(group)

    def _produce_notice(self, group: CommitGroup) -> None:
        p = self.partition
        notice = {
            "app": self.topics.app,
            "partition": p,
            "batches": group.stats.batches,
            "executions": group.stats.executions,
            "aborts": len(group.aborts),
            "last_batch_ids": group.last_batch_ids,
            "first_batch_ids": group.first_batch_ids,
            "committed_at_ms": int(time.time() * 1000),
        }
        # The order the border batches ran in rides in a header, outside the notice's schema
        # (schemaless Avro: a new field would break every reader of older notices).
        send(self.producer, self.topics.commits, encode_record(self.notice_schema, notice),
             partition=p, headers=[(ORDER_HEADER, encode_order(group.order))])  # fmt: skip

    def _produce_log(
        self, group: CommitGroup, writes: Mapping[bytes, bytes | None], positions: Mapping[str, int]
    ) -> None:
        p = self.partition
        if self.log_codec is not None:
            logged = self.log_codec.encode(group.journal, positions)
            self._send(self.topics.command_log, logged, partition=p, track=True)
            return
        # Only the last changelog record reports back: records of one partition land in
        # order, so its offset is the group's highest. A record that fails makes the
        # transaction's commit fail, so the others need no callback of their own. The last
        # also marks where the commit ends (`markers`), so it goes on its own: librdkafka's
        # batch call drops headers.
        changes: list[dict[str, Any]] = [{"key": k, "value": v} for k, v in writes.items()]
        if not changes:
            return
        last = changes.pop()
        if changes:
            send_many(self.producer, self.topics.changelog, changes, p)
        send(
            self.producer,
            self.topics.changelog,
            last["value"],
            key=last["key"],
            partition=p,
            headers=commit_end(group.spans),
            on_delivery=self._on_log_delivery,
        )

    def _produce_outputs(self, group: CommitGroup) -> None:
        p = self.partition
        sender = str(p).encode()
        for out in group.outputs:
            codec = self.batch_codecs[out.stream]
            batch = out.record  # encoded as its TE ended, if the engine has a RecordLimit
            if batch is None:
                batch = codec.encode(out.stream, out.batch_id, out.tuples)
            if out.hop is None:
                # One produce each, not librdkafka's batch call, which drops headers: readers
                # need the writer schema's (kafka/published_schemas.py).
                send(self.producer, self.topics.stream(out.stream), batch, partition=p,
                     headers=codec.headers)  # fmt: skip
            else:  # to the engine owning the tuples' new key, marked with who sent it
                hop = self.topics.hop(out.hop)
                send(self.producer, hop, batch, key=sender, partition=out.partition)

    def _send(
        self,
        topic: str,
        value: bytes | None,
        *,
        partition: int,
        key: bytes | None = None,
        track: bool = False,
    ) -> None:
        """Produce into the open transaction; a record that fails fails its commit, so only
        a `track`ed one (the recovery log's last) has a delivery callback, for its offset."""
        if track:
            send(self.producer, topic, value, key=key, partition=partition,
                 on_delivery=self._on_log_delivery)  # fmt: skip
        else:
            send(self.producer, topic, value, key=key, partition=partition)

    def _on_log_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failures(err, msg)
            return
        offset = msg.offset()
        if offset is not None and offset > self._last_log_offset:
            self._last_log_offset = offset


def capped(error: str) -> str:
    """`error`, cut to MAX_ERROR_CHARS with a note of how much was left out."""
    if len(error) <= MAX_ERROR_CHARS:
        return error
    return f"{error[:MAX_ERROR_CHARS]}... ({len(error) - MAX_ERROR_CHARS:,} more characters)"
