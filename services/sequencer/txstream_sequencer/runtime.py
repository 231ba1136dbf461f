"""The sequencer process: consume user topics, seal batches, write them exactly once.

One Kafka transaction per group commit holds the sealed batches, the dead letters, the lane
state and the input offsets (`send_offsets_to_transaction`), so after a crash the input is
re-read from where the last commit left it and every lane skips what it already handled. The
transactional.id is stable per sequencer name, so a restarted sequencer fences its zombie.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from txstream.config import Settings
from txstream.engine.hops import PROGRESS
from txstream.kafka.admin import TopicAdmin, TopicNotFoundError
from txstream.kafka.clients import (
    read_committed_consumer_config,
    send,
    transactional_producer_config,
)
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import RoutedSends, span_places
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Record
from txstream.schemas.codec import BatchCodec
from txstream.schemas.confluent import RegistryClient, RegistryUnavailable
from txstream.schemas.records import encode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.sequencer_config import Route, SequencerConfig
from txstream_sequencer import metrics
from txstream_sequencer.events import Event, EventReader, Position, Rejected
from txstream_sequencer.gate import CommitGate
from txstream_sequencer.lanes import DeadLetter, Lane, LaneState, Limits, Output, Reason
from txstream_sequencer.state import LaneId, decode_state, encode_state, lane_key

log = logging.getLogger(__name__)


class SequencerError(RuntimeError):
    """The sequencer cannot run as configured; the message says what to fix."""


@dataclass
class _Route:
    config: Route
    reader: EventReader
    codec: BatchCodec
    partitions: int  # of the border topic
    lanes: dict[int, Lane] = field(default_factory=dict)
    marked: int | None = None  # the last progress mark sent, in this incarnation
    dataflow: Dataflow | None = None  # a spanning route's app: its batches' keys
    sends: RoutedSends | None = None  # a spanning route's, in the commit being made

    def progress_mark(self) -> int | None:
        """The highest batch id up to which every batch is emitted to every partition: one
        below the lowest batch still held in any lane (the client may still add to it,
        anywhere), else the highest emitted. Client ids are taken in order, so a lower id
        can no longer come."""
        held = [b for lane in self.lanes.values() if (b := lane.unreleased()) is not None]
        if held:
            return min(held) - 1
        emitted = [lane.state.last for lane in self.lanes.values() if lane.state.last is not None]
        return max(emitted) if emitted else None

    def targets(
        self, lane: int, batch_id: int, tuples: list[Record]
    ) -> list[tuple[int, bytes | None]]:
        """The border partitions a batch of `lane` goes to, each with its copy's Kafka key:
        all of them when broadcast; for a spanning route, those owning a key it declares
        (partition 0 if its `touches` fails: engine 0 records the abort for all), noted for
        the commit's marks."""
        if self.dataflow is not None:
            try:
                places = span_places(self.dataflow, self.config.stream, tuples, self.partitions)
            except Exception:
                places = [0]
            if self.sends is None:
                self.sends = RoutedSends(self.partitions)
            return self.sends.copies(batch_id, places)
        parts = range(self.partitions) if self.config.broadcast else range(lane, lane + 1)
        return [(p, None) for p in parts]

    def spanning_marks(self) -> tuple[int, list[int]] | None:
        """After a commit's batches of a spanning route: the last id, and the partitions
        that did not get it (each is sent a progress mark of it)."""
        if self.sends is None or (top := self.sends.top) is None:
            return None
        behind = self.sends.behind(top)
        self.sends.clear()
        return top, behind


class Sequencer:
    def __init__(
        self,
        config: SequencerConfig,
        settings: Settings,
        registry: SchemaRegistry | None = None,
        app: App | None = None,
    ) -> None:
        """`registry`: where the routes' schemas are found; the schema directory's by
        default, or an app's (`App.schema_registry`), which knows its derived schemas.
        `app`: the app a spanning route places batches for, by its `touches`."""
        self.config = config
        self.app = app
        self.settings = settings
        self.registry = registry or SchemaRegistry(settings.schema_dir)
        self.lane_schema = self.registry.get("txstream.SequencerLane")
        self.dead_schema = self.registry.get("txstream.DeadLetter")
        self.stopping = threading.Event()
        self.routes: dict[str, _Route] = {}
        self.next_offsets: dict[tuple[str, int], int] = {}
        self.pending = Output()
        self.lane_ids: dict[Lane, LaneId] = {}

    # -- setup ---------------------------------------------------------------------------

    def _schema_registry(self, route: Route) -> RegistryClient | None:
        """For a route of Confluent-framed records: the registry, with the stream's schema
        registered as `<topic>-value` (so a producer's schema that the subject's
        compatibility level refuses is refused when that producer registers it)."""
        if route.format != "confluent":
            return None
        client = RegistryClient(self.settings.schema_registry_url)
        try:
            client.register(f"{route.topic}-value", self.registry.get(route.schema_name))
        except (ValueError, RegistryUnavailable) as e:
            raise SequencerError(f"route {route.topic!r}: {e}") from e
        return client

    def _spanning_dataflow(self, route: Route) -> Dataflow | None:
        """A spanning route's app dataflow, whose `touches` place its batches; the app must
        be given, be the route's, and read the stream with a spanning procedure, alone of
        its spanning streams on this sequencer (several need one id sequence)."""
        if not route.spanning:
            return None
        if self.app is None or self.app.name != route.app:
            given = "no app" if self.app is None else f"app {self.app.name!r}"
            raise SequencerError(f"route {route.topic!r} is spanning: the sequencer needs app "
                                 f"{route.app!r} (--app) to place its batches; it was given "
                                 f"{given}")  # fmt: skip
        dataflow = self.app.dataflow()
        if route.stream not in dataflow.spanning_streams:
            raise SequencerError(f"route {route.topic!r}: stream {route.stream!r} of app "
                                 f"{route.app!r} is not a spanning procedure's input")  # fmt: skip
        others = [r.topic for r in self.config.routes if r.spanning and r.app == route.app]
        if len(others) > 1:
            raise SequencerError(f"routes {others} are spanning routes of one app: their "
                                 "batch ids would be separate sequences, and an app's "
                                 "spanning streams need one (send them through one "
                                 "BatchProducer)")  # fmt: skip
        return dataflow

    def open(self) -> None:
        admin = TopicAdmin(self.settings)
        existing = set(admin.list_topics())
        for name, config in (
            (self.config.dead_letters, {}),
            (self.config.state_topic, {"cleanup.policy": "compact"}),
        ):
            if name not in existing:
                admin.create_topic(name, 1, config=config)
        self.producer = Producer(
            {
                **transactional_producer_config(
                    self.settings, f"txstream-sequencer-{self.config.name}"
                ),
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(60)  # fences a zombie predecessor, aborts its txn
        states = self._read_states()
        inputs: list[TopicPartition] = []
        notices: dict[str, list[int]] = {}
        for route in self.config.routes:
            if route.topic in self.routes:
                raise SequencerError(f"topic {route.topic!r} is routed twice")
            try:
                in_parts = admin.partitions(route.topic)
            except TopicNotFoundError as e:
                raise SequencerError(f"input topic {route.topic!r} does not exist") from e
            if route.progress and len(in_parts) != 1:
                raise SequencerError(
                    f"route {route.topic!r}: progress marks need its batch ids read in the "
                    f"order they were sent, so one input partition, not {len(in_parts)}"
                )
            if route.border_topic not in existing:
                admin.create_topic(route.border_topic, self.settings.kafka_partitions)
            out_parts = admin.partitions(route.border_topic)
            # a broadcast or spanning route seals one sequence of batches: one lane
            one = route.broadcast or route.spanning
            lane_parts = out_parts[:1] if one else out_parts
            r = _Route(
                route,
                EventReader(
                    self.registry.get(route.schema_name),
                    route.format,
                    len(lane_parts),
                    route.batch_id_field,
                    route.batch_id_header,
                    route.key_field,
                    self._schema_registry(route),
                ),
                BatchCodec(self.registry.get(route.schema_name)),
                len(out_parts),
                dataflow=self._spanning_dataflow(route),
            )
            limits = Limits(
                route.max_events,
                route.max_bytes,
                route.seal_after_ms,
                route.policy_events,
                route.policy_ms,
            )
            for p in lane_parts:
                lane_id = (route.border_topic, p)
                lane = Lane(
                    f"{route.stream}[{p}]", limits, states.get(lane_id, LaneState()), route.policy
                )
                r.lanes[p] = lane
                self.lane_ids[lane] = lane_id
            self.routes[route.topic] = r
            inputs += [TopicPartition(route.topic, p) for p in in_parts]
            if route.gate:
                commits = AppTopics(route.app).commits
                try:
                    notices[commits] = admin.partitions(commits)
                except TopicNotFoundError as e:
                    raise SequencerError(
                        f"route {route.topic!r} is gated on {commits!r}, which does not exist:"
                        f" start app {route.app!r} first"
                    ) from e
        self.gate = CommitGate(self.settings, notices) if notices else None
        conf = read_committed_consumer_config(self.settings, self.config.group_id)
        self.consumer = Consumer(conf)
        committed = self.consumer.committed(inputs, timeout=30)
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
        self.consumer.assign(committed)
        log.info(
            "sequencer %s: %d routes, resuming %s",
            self.config.name,
            len(self.routes),
            {f"{tp.topic}[{tp.partition}]": tp.offset for tp in committed},
        )

    def _read_states(self) -> dict[LaneId, LaneState]:
        states: dict[LaneId, LaneState] = {}
        for msg in read_to_committed_end(self.settings, self.config.state_topic):
            if msg.value():
                lane_id, state = decode_state(self.lane_schema, msg.value() or b"")
                states[lane_id] = state
        return states

    # -- loop ----------------------------------------------------------------------------

    def run(self) -> None:
        group_started = time.monotonic()
        try:
            while not self.stopping.is_set():
                self.step()
                if time.monotonic() - group_started >= self.config.commit_interval_ms / 1000:
                    self.commit()
                    group_started = time.monotonic()
            self.commit()
        finally:
            self.close()

    def step(self, max_records: int = 1000, timeout_s: float = 0.02) -> None:
        """Read what is available, then let every lane seal and release what it can."""
        for msg in self.consumer.consume(max_records, timeout=timeout_s):
            if msg.error() is None:
                self._handle(msg)
        now_ms = time.monotonic() * 1000
        if self.gate is not None:
            self.gate.poll()
        for route in self.routes.values():
            for lane in route.lanes.values():
                lane.tick(now_ms, self.pending)
                committed = None
                if route.config.gate and self.gate is not None:
                    committed = self.gate.last_committed(
                        route.config.app, route.config.stream, self.lane_ids[lane][1]
                    )
                lane.release(self.pending, committed, route.config.gate)

    def _handle(self, msg: Message) -> None:
        topic, part, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        route = self.routes[topic]
        self.next_offsets[(topic, part)] = offset + 1
        metrics.EVENTS.labels(route.config.stream).inc()
        position: Position = (topic, part, offset)
        now_ms = time.monotonic() * 1000
        try:
            event = route.reader.read(position, msg.key(), msg.value(), msg.headers())
        except Rejected as e:
            rejected = route.reader.unreadable(position, msg.key(), msg.value())
            lane = route.lanes[rejected.lane]
            if not lane.state.handled(rejected):
                lane.state.mark([rejected])
                self.pending.dead.append(DeadLetter(Reason(e.reason), e.error, rejected))
            return
        route.lanes[event.lane].add(event, now_ms, self.pending)

    # -- commit --------------------------------------------------------------------------

    def commit(self) -> None:
        """One Kafka transaction: batches, dead letters, lane state and input offsets."""
        out, self.pending = self.pending, Output()
        changed = [lane for lane in self.lane_ids if lane.state.changed]
        if not changed:
            return
        self.producer.begin_transaction()
        for batch in out.sealed:
            route = self.routes[batch.events[0].position[0]]
            value = route.codec.encode(route.config.stream, batch.batch_id, batch.tuples)
            for p, key in route.targets(batch.events[0].lane, batch.batch_id, batch.tuples):
                send(self.producer, route.config.border_topic, value, key=key, partition=p)
        self._produce_dead(out.dead)
        self._mark_progress()
        for lane in changed:
            lane.state.compact(lane.pending_floor())
            state = encode_state(self.lane_schema, self.lane_ids[lane], lane.state)
            send(self.producer, self.config.state_topic, state, key=lane_key(self.lane_ids[lane]))
        offsets = self.input_offsets()
        self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), 30
        )
        self.producer.commit_transaction(60)
        for lane in changed:
            lane.state.changed = False
        self._count(out)

    def _mark_progress(self) -> None:
        """Progress marks (`engine.hops.PROGRESS`) in the transaction, after its batches: a
        restarted sequencer sends its first again, which the engines take as no news."""
        for route in self.routes.values():
            spanning = route.spanning_marks()
            if spanning is not None:
                top, behind = spanning
                value = route.codec.encode(PROGRESS, top, [])
                for p in behind:
                    send(self.producer, route.config.border_topic, value, partition=p)
            if not route.config.progress:
                continue
            mark = route.progress_mark()
            if mark is None or (route.marked is not None and mark <= route.marked):
                continue
            value = route.codec.encode(PROGRESS, mark, [])
            for p in range(route.partitions):
                send(self.producer, route.config.border_topic, value, partition=p)
            route.marked = mark

    def _count(self, out: Output) -> None:
        def stream(batch_events: list[Event]) -> str:
            return self.routes[batch_events[0].position[0]].config.stream

        for batch in out.sealed:
            metrics.SEALED.labels(stream(batch.events)).inc()
        for dup in out.duplicates:
            metrics.DUPLICATES.labels(stream(dup.events)).inc()
        for d in out.dead:
            metrics.DEAD_LETTERS.labels(stream([d.event]), d.reason.value).inc()

    def _produce_dead(self, dead: Iterable[DeadLetter]) -> None:
        now_ms = int(time.time() * 1000)
        for d in dead:
            topic, part, offset = d.event.position
            record = {
                "sequencer": self.config.name,
                "reason": d.reason.value,
                "error": d.error,
                "stream": self.routes[topic].config.stream,
                "topic": topic,
                "partition": part,
                "offset": offset,
                "key": d.event.key,
                "payload": d.event.payload,
                "batch_id": d.event.batch_id,
                "at_ms": now_ms,
            }
            send(self.producer, self.config.dead_letters, encode_record(self.dead_schema, record))

    def input_offsets(self) -> list[TopicPartition]:
        """Per input partition: the lowest offset any lane still holds, else all consumed."""
        floors = dict(self.next_offsets)
        for route in self.routes.values():
            for lane in route.lanes.values():
                for key, offset in lane.pending_floor().items():
                    floors[key] = min(floors.get(key, offset), offset)
        return [TopicPartition(t, p, o) for (t, p), o in sorted(floors.items())]

    def close(self) -> None:
        self.consumer.close()
        if self.gate is not None:
            self.gate.close()
        self.producer.flush(10)
