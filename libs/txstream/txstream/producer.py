"""`BatchProducer`: atomic batches of plain rows onto an app's border streams.

A batch is what a procedure's TE runs on: its rows reach one partition engine together, or
not at all. The producer checks each row against its stream's schema before anything is
sent, places the batch where the dataflow needs it (the partition its key names; for a
spanning procedure's input, the partitions owning a key the batch declares), and sends it
inside a Kafka transaction, so a reader sees whole batches only. Batch ids increase per
stream: given, or assigned after the highest one the stream's topic already holds; the
spanning streams of an app share one sequence, which is the order their batches run in.
A transaction that sent spanning batches ends with a progress mark, on every spanning
stream, to each partition that did not get the last id: every engine knows how far each
stream has come (batches of several spanning streams wait for it, and cut queries and
commit notices go by it). So one producer sends an app's spanning streams.

Raw events take the other way in: one JSON record each, to the topic of a sequencer route
(`send_events`), which seals them into batches. They are checked against the stream's schema
here too, so a bad event fails its sender, naming it, instead of becoming a dead letter.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from txstream.config import Settings
from txstream.engine.hops import PROGRESS
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import (
    delivery_failure,
    send,
    transactional_producer_config,
)
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import RoutedSends, partition_of, span_places
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.app import App
from txstream.model.declarations import Record, Stream, name_of
from txstream.schemas import BatchCodec, find_error
from txstream.sequencer_config import Route, SequencerConfig, load_config

__all__ = ["BatchError", "BatchProducer"]

_TIMEOUT_S = 30.0
_TAIL = 256  # offsets read back from a partition's end to find its highest batch id
_SPANNING = "__spanning__"  # the one id sequence of an app's spanning streams


class BatchError(ValueError):
    """A batch that cannot be sent; the message names the stream, the row and the field."""


class BatchProducer:
    """Sends atomic batches of plain rows (dicts) to the border streams of `app`.

        producer = BatchProducer(app)
        producer.send("clicks", [{"user": "ann", "page": "/home"}])
        with producer.transaction():  # several batches, all or none
            producer.send(clicks, rows_1)
            producer.send(clicks, rows_2)
        producer.close()

    `transactional_id`: give a stable one to a producer that restarts, so the broker fences
    the previous incarnation; by default each producer has its own. `sequencer`: the
    sequencer's configuration (its TOML file, or loaded), whose routes `send_events` uses.
    """

    def __init__(
        self,
        app: App,
        settings: Settings | None = None,
        *,
        transactional_id: str | None = None,
        sequencer: Path | str | SequencerConfig | None = None,
    ) -> None:
        self.app = app
        if isinstance(sequencer, str | Path):
            sequencer = load_config(Path(sequencer))
        self._sequencer = sequencer
        self.settings = settings or Settings()
        self.topics = AppTopics(app.name)
        self._dataflow = app.dataflow()
        # as a worker does when it starts: sending first must not fail for want of topics
        ensure_app_topics(TopicAdmin(self.settings), app, self.settings.kafka_partitions)
        self._registry = app.schema_registry(self.settings.schema_dir)
        self._codecs: dict[str, BatchCodec] = {}
        self._partitions: dict[str, int] = {}
        self._last_id: dict[str, int] = {}
        # in the open transaction: spanning stream -> what was sent on it
        self._spanning_sent: dict[str, RoutedSends] = {}
        tid = transactional_id or f"txstream-batches-{app.name}-{uuid.uuid4().hex}"
        self._producer = Producer(transactional_producer_config(self.settings, tid))
        self._producer.init_transactions(_TIMEOUT_S)
        self._failures: list[KafkaError] = []
        self._open = False

    def send(
        self,
        stream: str | Stream,
        rows: Sequence[Mapping[str, Any]],
        batch_id: int | None = None,
    ) -> int:
        """Send one atomic batch of `rows` to `stream`; its batch id is returned. Outside
        `transaction()` the batch is committed before this returns."""
        name = name_of(stream)
        tuples = self.check(name, rows)
        codec = self._codec(name)
        declared = self.app.decl.streams[name]
        batch_id = self._next_id(name, batch_id)
        places = self._places(name, declared, tuples, batch_id)
        value = codec.encode(name, batch_id, tuples)
        if name in self._dataflow.spanning_streams:
            copies = self._routed(name).copies(batch_id, places)
        else:
            copies = [(p, None) for p in places]
        with self.transaction():
            for partition, key in copies:
                send(self._producer, self.topics.stream(name), value, key=key,
                     partition=partition, headers=codec.headers,
                     on_delivery=self._delivered)  # fmt: skip
        return batch_id

    def send_events(
        self,
        stream: str | Stream,
        rows: Sequence[Mapping[str, Any]],
        batch_id: int | None = None,
    ) -> int:
        """Send `rows` as raw events, one JSON record each, to the topic of the sequencer
        route that feeds `stream`, which seals them into batches. A route that takes batch
        ids from a field or a header needs `batch_id` (every row gets it); a route that
        seals by its own policy refuses one. Every row is checked against the stream's
        schema first: nothing is sent if one does not fit. Outside `transaction()` the
        events are committed before this returns. Returns how many were sent."""
        name = name_of(stream)
        route = self._route(name)
        if route.format != "json":
            raise BatchError(f"route {route.topic!r} reads {route.format} events; send_events "
                             "writes JSON (use a route with format = \"json\")")  # fmt: skip
        if route.policy and batch_id is not None:
            raise BatchError(f"route {route.topic!r} seals batches by its own policy: it "
                             f"assigns the ids, so batch_id={batch_id} has no place")  # fmt: skip
        if not route.policy and batch_id is None:
            where = route.batch_id_field or route.batch_id_header
            raise BatchError(f"route {route.topic!r} takes each event's batch id from "
                             f"{where!r}: give batch_id")  # fmt: skip
        field = route.batch_id_field
        # the id goes into its field, checked with the row when the schema has that field
        in_schema = field is not None and _has_field(self._codec(name).tuple_schema, field)
        events = [{**row, field: batch_id} if in_schema and field else dict(row) for row in rows]
        self._fit(name, events, "event")
        values: list[bytes] = []
        for i, value in enumerate(events):
            if field is not None:
                value[field] = batch_id
            try:
                values.append(json.dumps(value).encode())
            except (TypeError, ValueError) as e:  # fits Avro, but has no JSON form
                raise BatchError(f"stream {name!r}: event {i}: no JSON form: {e}") from None
        headers = None
        if route.batch_id_header is not None:
            headers = [(route.batch_id_header, str(batch_id).encode())]
        with self.transaction():
            for payload in values:
                send(self._producer, route.topic, payload, headers=headers,
                     on_delivery=self._delivered)  # fmt: skip
        return len(values)

    def _route(self, stream: str) -> Route:
        """The sequencer route that feeds `stream` of this app."""
        if self._sequencer is None:
            raise BatchError("send_events needs the sequencer's configuration: "
                             "BatchProducer(app, sequencer=\"sequencer.toml\")")  # fmt: skip
        self._codec(stream)  # a stream the app has, and takes input from outside
        for route in self._sequencer.routes:
            if route.app == self.app.name and route.stream == stream:
                return route
        mine = [r.stream for r in self._sequencer.routes if r.app == self.app.name]
        raise BatchError(f"sequencer {self._sequencer.name!r} has no route to stream "
                         f"{stream!r} of app {self.app.name!r}; it routes to "
                         f"{', '.join(mine) or 'none of its streams'}")  # fmt: skip

    def check(self, stream: str | Stream, rows: Sequence[Mapping[str, Any]]) -> list[Record]:
        """The rows as they would be sent, or `BatchError` naming the first that cannot be:
        not of the stream's schema, or, on a keyed stream, of another partition key."""
        name = name_of(stream)
        tuples = [dict(r) for r in rows]
        self._fit(name, tuples, "row")
        self._check_key(name, self.app.decl.streams[name], tuples)
        return tuples

    def _fit(self, name: str, tuples: Sequence[Mapping[str, Any]], what: str) -> None:
        """`BatchError` naming the first of `tuples` (each a `what`) that is not of stream
        `name`'s schema."""
        schema = self._codec(name).tuple_schema
        for i, t in enumerate(tuples):
            problem = find_error(t, schema)
            if problem:
                raise BatchError(f"stream {name!r}: {what} {i}: {problem}")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Every batch sent inside commits together, or none does (on an exception)."""
        if self._open:
            yield
            return
        self._producer.begin_transaction()
        self._open = True
        try:
            yield
            self._mark_progress()
            self._producer.flush(_TIMEOUT_S)
            if self._failures:
                raise delivery_failure(self._producer, self._failures, _TIMEOUT_S)
            self._producer.commit_transaction(_TIMEOUT_S)
        except BaseException:
            with suppress(KafkaException):
                self._producer.abort_transaction(_TIMEOUT_S)
            self._last_id.clear()  # ids assigned in it were never used: look again
            raise
        finally:
            self._open = False
            self._failures = []
            self._spanning_sent.clear()

    def _mark_progress(self) -> None:
        """A progress mark of the last spanning batch id sent in this transaction, on every
        spanning stream, to each partition that did not get that batch: an engine is sent
        only the batches that touch it, and the mark says none up to that id is still to
        come on that stream (the app's spanning streams are one id sequence)."""
        tops = [t for sends in self._spanning_sent.values() if (t := sends.top) is not None]
        if not tops:
            return
        top = max(tops)
        for name in self._dataflow.spanning_streams:
            codec = self._codec(name)
            value = codec.encode(PROGRESS, top, [])
            for partition in self._routed(name).behind(top):
                send(self._producer, self.topics.stream(name), value, partition=partition,
                     headers=codec.headers, on_delivery=self._delivered)  # fmt: skip

    def _routed(self, name: str) -> RoutedSends:
        """What this transaction sent on spanning stream `name`."""
        sends = self._spanning_sent.get(name)
        if sends is None:
            sends = self._spanning_sent[name] = RoutedSends(self._partition_count(name))
        return sends

    def close(self) -> None:
        self._producer.flush(_TIMEOUT_S)

    def __enter__(self) -> BatchProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _codec(self, name: str) -> BatchCodec:
        codec = self._codecs.get(name)
        if codec is not None:
            return codec
        declared = self.app.decl.streams.get(name)
        if declared is None:
            raise BatchError(f"app {self.app.name!r} has no stream {name!r}; streams: "
                             f"{', '.join(sorted(self.app.decl.streams))}")  # fmt: skip
        made_by = [p.name for p in self.app.decl.procedures.values() if name in p.outputs]
        if made_by:
            raise BatchError(f"stream {name!r} is the output of procedure {made_by[0]!r}; "
                             "only a border stream takes batches from outside")  # fmt: skip
        codec = BatchCodec(self._registry.get(declared.schema))
        self._codecs[name] = codec
        return codec

    def _partition_count(self, name: str) -> int:
        count = self._partitions.get(name)
        if count is None:
            count = len(TopicAdmin(self.settings).partitions(self.topics.stream(name)))
            self._partitions[name] = count
        return count

    def _check_key(self, name: str, declared: Stream, tuples: list[dict[str, Any]]) -> None:
        """A keyed stream's batch goes to the partition its rows' keys name: they must name
        one (on a one-partition topic, any keys do)."""
        field = declared.key_field
        if field is None or name in self._dataflow.spanning_streams:
            return
        partitions = self._partition_count(name)
        places = set()
        for i, t in enumerate(tuples):
            value: Any = t.get(field)
            try:
                places.add(partition_of((value,), partitions))
            except (TypeError, ValueError) as e:
                raise BatchError(f"stream {name!r}: row {i}: key field {field!r}: {value!r} "
                                 f"is no partition key ({e})") from None  # fmt: skip
        if len(places) > 1:
            raise BatchError(f"stream {name!r}: the rows' key field {field!r} names partitions "
                             f"{sorted(places)} of {partitions}; a batch goes to one")  # fmt: skip

    def _places(
        self, name: str, declared: Stream, tuples: list[dict[str, Any]], batch_id: int
    ) -> list[int]:
        """For a spanning procedure's input, the partitions owning a key the batch declares
        (`span_places`); the partition the key names; or, unkeyed, the next in turn."""
        partitions = self._partition_count(name)
        if name in self._dataflow.spanning_streams:
            return self._span_places(name, tuples, partitions)
        if declared.key_field is None or not tuples:
            return [batch_id % partitions]
        return [partition_of((tuples[0][declared.key_field],), partitions)]

    def _span_places(self, name: str, tuples: list[dict[str, Any]], partitions: int) -> list[int]:
        """`span_places`, or `BatchError` naming the first row whose declared keys cannot
        be had (its `touches` raised, or returned no partition key)."""
        try:
            return span_places(self._dataflow, name, tuples, partitions)
        except Exception:
            for i, t in enumerate(tuples):
                try:
                    span_places(self._dataflow, name, [t], partitions)
                except Exception as e:
                    raise BatchError(f"stream {name!r}: row {i}: its touches cannot place it: "
                                     f"{type(e).__name__}: {e}") from None  # fmt: skip
            raise

    def _next_id(self, name: str, given: int | None) -> int:
        """The batch id to send: `given`, or the next after the highest sent on `name`, or,
        for a spanning stream, on any of the app's spanning streams (one sequence)."""
        spanning = self._dataflow.spanning_streams
        sequence = _SPANNING if name in spanning else name
        last = self._last_id.get(sequence)
        if last is None:
            last = max(map(self._highest_on_topic, spanning if name in spanning else [name]))
        if given is not None and given <= last:
            which = "on the app's spanning streams (one sequence)" if name in spanning else ""
            raise BatchError(f"stream {name!r}: batch id {given} is not above {last}, the "
                             f"highest sent{' ' + which if which else ''}; batch ids "
                             "increase")  # fmt: skip
        chosen = last + 1 if given is None else given
        self._last_id[sequence] = chosen
        return chosen

    def _highest_on_topic(self, name: str) -> int:
        topic = self.topics.stream(name)
        codec = self._codec(name)
        admin = TopicAdmin(self.settings)
        highest = 0
        for partition in range(self._partition_count(name)):
            low = admin.start_offset(topic, partition)
            start = admin.stable_end(topic, partition)
            while start > low:
                start = max(low, start - _TAIL)
                values = [
                    m.value() for m in read_to_committed_end(self.settings, topic, partition, start)
                ]
                found = [codec.decode(v).batch_id for v in values if v]
                if found:
                    highest = max(highest, *found)
                    break
        return highest

    def _delivered(self, error: KafkaError | None, _: Message) -> None:
        if error is not None:
            self._failures.append(error)


def _has_field(schema: Any, name: str) -> bool:
    fields = schema.get("fields", []) if isinstance(schema, dict) else []
    return any(f["name"] == name for f in fields)
