"""A partition's input router: from a delivered record to the engine call it stands for.

It drops redeliveries (a record before the position already received), decodes each
record by its topic (border batches, repartitioned parts, the exchange's reads, OLTP
requests, decisions and promises), and hands it to the engine. A record the engine cannot
take yet (a 2PC participant blocks it, or spanning batches are queued ahead of it) is
deferred, in arrival order, and retried as soon as anything changes; a record that cannot
be decoded is a dead letter, moved past.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import replace

from txstream.config import Settings
from txstream.engine.hops import PROGRESS
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import promise_id
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.model.dataflow import Dataflow
from txstream.oltp.messages import CLIENT_REQUEST_KINDS, Decision, EngineRequest, Wire
from txstream.oltp.origin import Unauthenticated
from txstream.recovery.sources import RecoveryError
from txstream.runtime.inputs import Inputs
from txstream.schemas.codec import BatchCodec, BatchDecodeError
from txstream.state.reads_codec import ReadsCodec, ReadsDecodeError

log = logging.getLogger(__name__)

# An input record as the pump delivers it: (topic, offset, value, key).
InputRecord = tuple[str, int, bytes | None, bytes | None]


class RefusedReplyTo(ValueError):
    """A direct transaction names a reply topic that is not the app's client reply topic:
    dead-lettered, never run, so a client cannot make an engine write anywhere else."""


class InputRouter:
    def __init__(
        self,
        engine: PartitionEngine,
        dataflow: Dataflow,
        topics: AppTopics,
        inputs: Inputs,
        batch_codecs: Mapping[str, BatchCodec],
        wire: Wire,
        reads: ReadsCodec,
    ) -> None:
        self.engine = engine
        self.dataflow = dataflow
        self.topics = topics
        self.inputs = inputs
        self.partition = engine.partition
        self.batch_codecs = batch_codecs
        self.wire = wire
        self.reads = reads
        self.spanning = bool(inputs.exchange)  # the app has spanning procedures
        self._received: dict[str, int] = {}
        # Inputs that arrive while a 2PC participant is blocked, in arrival order.
        self._deferred: deque[InputRecord] = deque()
        self._deferred_requests = 0  # of them, the coordinator's requests
        # spanning topic -> the end the consumer reached while some of it was deferred
        self._ends: dict[str, int] = {}

    @property
    def waiting(self) -> bool:
        """Some input is deferred."""
        return bool(self._deferred)

    def positions(self) -> dict[str, int]:
        """{input topic: next offset to read}, as of the last processed record."""
        return {topic: self.engine.position(topic) for topic in self.inputs.topics}

    def rewind(self) -> dict[str, int]:
        """The consumer is about to seek to `positions()`: forget records received past them."""
        self._deferred.clear()
        self._deferred_requests = 0
        self._ends.clear()
        self._received = self.positions()
        return dict(self._received)

    def catch_up(self, settings: Settings) -> None:
        """Per-partition input waits until each spanning topic is read to its end as of
        now, so a batch whose reads went out before a crash runs again first (`SpanRunner`)."""
        if not self.spanning:
            return
        admin = TopicAdmin(settings)
        for stream in self.engine.spanning:
            topic = self.topics.stream(stream)
            end = admin.stable_end(topic, self.partition)
            self.engine.spans.catch_up(topic, end)
            if self.engine.spans.catching_up:
                log.info("p%d: other input waits until %s is read from %d to %d, its end now",
                         self.partition, topic, self.engine.position(topic), end)  # fmt: skip

    def held_back(self) -> list[str]:
        """Input topics not to deliver yet: while the spanning input catches up after a
        start, every per-partition one (border streams, repartitioned edges, requests)."""
        if not (self.spanning and self.engine.spans.catching_up):
            return []
        spanning = {self.topics.stream(s) for s in self.engine.spanning}
        flowing = spanning | {self.topics.exchange, self.topics.decisions}
        return [t for t in self.inputs.topics if t not in flowing]

    def at_end(self, topic: str, end: int) -> None:
        """The consumer has read `topic` to its end, offset `end`: a spanning topic is
        caught up once nothing of it waits among the deferred records."""
        if not self.spanning:
            return
        self._ends[topic] = end
        self._reach_ends()

    def handle(self, topic: str, offset: int, value: bytes | None, key: bytes | None) -> None:
        """Route one record; one before the position received is a redelivery, dropped."""
        if offset < self._received[topic]:
            return
        self._received[topic] = offset + 1
        if topic == self.topics.decisions or topic == self.topics.exchange:
            self._process(topic, offset, value, key)
            self.drain()
        elif self._deferred and topic == self.topics.requests and self._read_ahead(offset, value):
            pass
        elif self._deferred or not self._process(topic, offset, value, key):
            self._deferred.append((topic, offset, value, key))
            self._deferred_requests += topic == self.topics.requests

    def drain(self) -> None:
        """Process the deferred records, in arrival order, until one must wait again."""
        while self._deferred and self._process(*self._deferred[0]):
            if self._deferred.popleft()[0] == self.topics.requests:
                self._deferred_requests -= 1
        self._reach_ends()

    def replay_oltp(self, topic: str, offset: int, value: bytes) -> None:
        """An OLTP record of the command log's replay, which must apply at once."""
        if not self._apply_oltp(topic, offset, value):
            raise RecoveryError(f"replayed {topic} record conflicts with a prepared transaction")

    def _reach_ends(self) -> None:
        """Each spanning topic read to its end with none of its records deferred any more
        is read up to that end."""
        for topic, end in list(self._ends.items()):
            if not any(t == topic for t, *_ in self._deferred):
                del self._ends[topic]
                self.engine.spans.reached(topic, end)

    def _read_ahead(self, offset: int, value: bytes | None) -> bool:
        """A query goes ahead of the records waiting (for spanning batches to run, or for a
        decision): it changes nothing, and between two TEs the engine's state is always
        right after its last batch. Not ahead of an earlier request, though: that one's
        offset would be skipped. False if it must wait after all."""
        return not self._deferred_requests and self._oltp(
            self.topics.requests, offset, value, reads_only=True
        )

    def _process(self, topic: str, offset: int, value: bytes | None, key: bytes | None) -> bool:
        """Process one record; False if it must wait (nothing applied): for a 2PC decision,
        or while spanning batches are queued (`SpanRunner.holds`; a read need not wait, as
        the engine's state between two TEs is always right after its last batch)."""
        engine = self.engine
        if topic == self.topics.exchange:
            self._exchange(offset, value)
            return True
        if topic == self.topics.decisions:
            return self._oltp(topic, offset, value)
        stream = self.inputs.streams.get(topic)
        hop = self.inputs.hops.get(topic)
        if stream is None and hop is None:  # the coordinator's requests
            return self._oltp(topic, offset, value)
        if self.spanning and engine.spans.holds(stream in engine.spanning, stream):
            return False
        if engine.blocked:
            return False  # TEs are not checked row by row: they wait for every decision
        if hop is not None:
            self._hop(hop, (topic, self.partition, offset), value, key)
            return True
        assert stream is not None
        source = (topic, self.partition, offset)
        try:
            if value is None:
                raise BatchDecodeError("empty record value")
            batch = self.batch_codecs[stream].decode(value)
        except BatchDecodeError as e:
            engine.reject(stream, source, "undecodable", str(e))
            return True
        if batch.stream == PROGRESS:
            engine.progress(stream, batch.batch_id, source)
        else:
            engine.process(stream, batch.batch_id, batch.tuples, source, value)
        return True

    def _hop(
        self, procedure: str, source: tuple[str, int, int], value: bytes | None, key: bytes | None
    ) -> None:
        """A part of a batch for repartitioned `procedure` (or a progress marker), sent by
        another engine's commit, keyed by that engine; one that cannot be decoded, or names
        no engine, is a dead letter, and moved past."""
        stream = self.dataflow.procedure(procedure).input
        try:
            if value is None:
                raise BatchDecodeError("empty record value")
            batch = self.batch_codecs[stream].decode(value)
            sender = int(key or b"")
            if not 0 <= sender < self.engine.partitions:
                raise ValueError(f"no engine {sender}")
        except (BatchDecodeError, ValueError) as e:
            self.engine.reject(source[0], source, "undecodable", f"{e} (key {key!r})")
            return
        self.engine.process_hop(procedure, sender, batch.batch_id, batch.tuples, source)

    def _exchange(self, offset: int, value: bytes | None) -> None:
        """Another engine's reads for spanning batches (one, or several packed); a record
        that cannot be decoded is a dead letter (the batches it was for then wait, and the
        metrics show it)."""
        source = (self.topics.exchange, self.partition, offset)
        try:
            every = self.reads.decode_all(value or b"")
        except ReadsDecodeError as e:
            self.engine.reject(self.topics.exchange, source, "undecodable", str(e))
            return
        for reads in every:
            self.engine.spans.receive(reads, source)

    def _oltp(self, topic: str, offset: int, value: bytes | None, reads_only: bool = False) -> bool:
        """A coordinator request or decision; one that cannot be decoded is moved past.
        False if it must wait (nothing applied); with `reads_only`, anything but a read."""
        try:
            if value is None:
                raise ValueError("empty record value")
            if not self._apply_oltp(topic, offset, value, reads_only):
                return False
        except (ValueError, TypeError, EOFError, KeyError) as e:
            reason = "undecodable"
            if isinstance(e, Unauthenticated):
                reason = "unauthenticated"
            elif isinstance(e, RefusedReplyTo):
                reason = "refused_reply_to"
            self.engine.reject(topic, (topic, self.partition, offset), reason, str(e))
            return True
        self.engine.journal_oltp(topic, offset)
        self.engine.set_position(topic, offset + 1)
        return True

    def _apply_oltp(self, topic: str, offset: int, value: bytes, reads_only: bool = False) -> bool:
        if topic == self.topics.decisions:
            self.engine.decide(self.wire.decode(Decision, value))
            return True
        promises = topic == self.topics.promises
        req = self.wire.decode(EngineRequest, value, promises=promises)
        if promises:  # named by its place, whatever its client named it (`promise_id`)
            req = replace(req, txn_id=promise_id(self.partition, offset))
        if (req.kind in CLIENT_REQUEST_KINDS) != promises:
            # clients write promises, and only the coordinator the requests
            raise ValueError(
                f"a {req.kind!r} request on {topic}: {self.topics.promises} takes promised "
                "(BASIC, BASE) and direct transactions only, and nothing else does"
            )
        if req.kind == "direct":
            problem = self.topics.reply_problem(req.reply_to)
            if problem is not None:
                raise RefusedReplyTo(problem)
        if req.kind != "read" and (reads_only or self._spans_hold_writes()):
            return False
        return self.engine.request(req)

    def call(self, req: EngineRequest) -> bool:
        """A direct transaction sent to the worker's endpoint (`runtime.direct_calls`): no
        record, so nothing to decode or defer; False if it must wait, as a direct one from
        the promises topic would (`PartitionEngine.call`)."""
        return not self._spans_hold_writes() and self.engine.call(req)

    def _spans_hold_writes(self) -> bool:
        """Spanning batches are queued: a write could change rows they have read."""
        return self.spanning and self.engine.spans.holds(spanning=False)
