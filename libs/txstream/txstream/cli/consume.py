"""`txstream consume`: committed records of a topic, decoded, as JSON lines on stdout.

The output of plain mode is valid input for `txstream produce`, and so is envelope mode's
(its `stream` key must match `--envelope`). Progress and the summary go to stderr.
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import time
import uuid
from collections.abc import Callable
from io import BytesIO
from typing import Annotated, Any

import typer
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from fastavro import schemaless_reader
from rich.console import Console
from rich.markup import escape

from txstream.cli.app_option import app_or_exit
from txstream.cli.produce import SCHEMA_HEADER, plural
from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.kafka.clients import error_text, read_committed_consumer_config
from txstream.kafka.topics import AppTopics
from txstream.oltp.messages import type_byte_of
from txstream.oltp.origin import TAG_BYTES
from txstream.schemas import BatchCodec, BatchDecodeError, SchemaError, SchemaRegistry

err = Console(stderr=True, highlight=False, soft_wrap=True)

Decoder = Callable[[bytes], Any]


class DecodeError(ValueError):
    """A record value that does not decode with the schema it was taken to have."""


def consume(
    topic: Annotated[
        str | None, typer.Option("--topic", "-t", help="Topic to read (or give --stream).")
    ] = None,
    app_spec: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="module:app whose schemas decode the records (with "
            "--stream, its topic and record schema too).",
        ),
    ] = None,
    stream: Annotated[
        str | None,
        typer.Option("--stream", help="A stream of --app: its topic, its batches decoded."),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema",
            "-s",
            help=f"Schema full name (the tuple schema with --envelope); "
            f"default: each record's {SCHEMA_HEADER} header.",
        ),
    ] = None,
    envelope: Annotated[
        bool, typer.Option("--envelope", help="Records are atomic-batch envelopes.")
    ] = False,
    max_records: Annotated[
        int | None, typer.Option("--max", min=1, help="Stop after this many records.")
    ] = None,
    idle_timeout: Annotated[
        float, typer.Option(min=0.0, help="Stop after this many seconds without a record.")
    ] = 5.0,
    from_beginning: Annotated[
        bool,
        typer.Option("--from-beginning/--from-end", help="Start at the oldest or the newest."),
    ] = True,
) -> None:
    """Print committed (read_committed) records as JSON lines."""
    settings = Settings()
    registry: SchemaRegistry | None = None
    if app_spec is not None:
        application = app_or_exit(app_spec)
        try:
            registry = application.schema_registry(settings.schema_dir)
        except SchemaError as e:
            err.print(f"[red]error:[/red] {escape(str(e))}")
            raise typer.Exit(2) from None
        if stream is not None:
            declared = application.decl.streams.get(stream)
            if declared is None:
                names = ", ".join(sorted(application.decl.streams))
                err.print(f"[red]error:[/red] app {application.name!r} has no stream "
                          f"{stream!r}; streams: {names}")  # fmt: skip
                raise typer.Exit(2)
            topic = topic or AppTopics(application.name).stream(stream)
            schema, envelope = schema or declared.schema, True
    elif stream is not None:
        err.print("[red]error:[/red] --stream names a stream of an app: give --app too")
        raise typer.Exit(2)
    if topic is None:
        err.print("[red]error:[/red] give --topic, or --app and --stream")
        raise typer.Exit(2)
    decoders = Decoders(settings, schema, envelope, registry)
    if schema is not None:
        try:
            decoders.get(schema)
        except SchemaError as e:
            raise typer.BadParameter(str(e), param_hint="'--schema'") from e
    try:
        partitions = TopicAdmin(settings).partitions(topic)
    except KafkaAdminError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e

    group = f"txstream-consume-{uuid.uuid4().hex}"
    consumer = Consumer(
        read_committed_consumer_config(settings, group, from_beginning=from_beginning)
    )
    start = OFFSET_BEGINNING if from_beginning else OFFSET_END
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    count = 0
    try:
        deadline = time.monotonic() + idle_timeout
        while max_records is None or count < max_records:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            msg = consumer.poll(min(remaining, 0.5))
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            sys.stdout.write(to_json(decoders.decode(msg)) + "\n")
            count += 1
            deadline = time.monotonic() + idle_timeout
    except (DecodeError, KafkaException) as e:
        sys.stdout.flush()
        reason = error_text(e) if isinstance(e, KafkaException) else str(e)
        err.print(f"[red]error:[/red] {escape(reason)}")
        raise typer.Exit(1) from e
    finally:
        consumer.close()
    sys.stdout.flush()
    err.print(f"consumed {plural(count, 'record')} from {topic}", markup=False)


class Decoders:
    """Decoders by schema name, built on first use: the header may name any schema."""

    def __init__(
        self,
        settings: Settings,
        schema: str | None,
        envelope: bool,
        registry: SchemaRegistry | None = None,
    ) -> None:
        self._settings = settings
        self._schema = schema
        self._envelope = envelope
        self._registry = registry
        self._decoders: dict[str, Decoder] = {}

    def get(self, name: str) -> Decoder:
        decoder = self._decoders.get(name)
        if decoder is None:
            if self._registry is None:
                self._registry = SchemaRegistry(self._settings.schema_dir)
            parsed = self._registry.get(name)
            decoder = (
                envelope_decoder(BatchCodec(parsed))
                if self._envelope
                else plain_decoder(parsed, type_byte_of(name))
            )
            self._decoders[name] = decoder
        return decoder

    def decode(self, msg: Message) -> Any:
        where = f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"
        value = msg.value()
        if value is None:
            return None
        name = self._schema or header(msg, SCHEMA_HEADER)
        if name is None:
            raise DecodeError(f"{where}: no {SCHEMA_HEADER} header; pass --schema")
        try:
            decoder = self.get(name)
        except SchemaError as e:
            raise DecodeError(f"{where}: {e}") from e
        try:
            return decoder(value)
        except DecodeError as e:
            batch = not self._envelope and type_byte_of(name) is None
            hint = " (an atomic batch? try --envelope)" if batch else ""
            raise DecodeError(f"{where}: {e}{hint}") from e


def plain_decoder(parsed: Any, type_byte: bytes | None = None) -> Decoder:
    """`type_byte`: the records are OLTP messages, each one type byte then its record."""

    def decode(data: bytes) -> Any:
        if type_byte is not None:
            if data[:1] != type_byte:
                raise DecodeError(
                    f"not a {parsed['name']} message: type byte {data[:1]!r}, not {type_byte!r}"
                )
            data = data[1:]
        buf = BytesIO(data)
        try:
            record = schemaless_reader(buf, parsed, None)
        except Exception as e:
            raise DecodeError(f"not a {parsed['name']} record: {type(e).__name__}: {e}") from e
        left = len(data) - buf.tell()
        # a service's OLTP record ends in its proof of origin, which is not shown
        if left and not (type_byte is not None and left == TAG_BYTES):
            raise DecodeError(f"not a {parsed['name']} record: {left} bytes left over")
        return record

    return decode


def envelope_decoder(codec: BatchCodec) -> Decoder:
    def decode(data: bytes) -> Any:
        try:
            batch = codec.decode(data)
        except BatchDecodeError as e:
            raise DecodeError(str(e)) from e
        return {"stream": batch.stream, "batch_id": batch.batch_id, "tuples": batch.tuples}

    return decode


def header(msg: Message, key: str) -> str | None:
    headers = msg.headers() or []
    for k, v in headers.items() if isinstance(headers, dict) else headers:
        if k == key and v is not None:
            return v.decode() if isinstance(v, bytes) else str(v)
    return None


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_json_value)


def _json_value(value: Any) -> Any:
    """Avro values JSON lacks: bytes as Avro's JSON encoding does (code points 0-255)."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    raise TypeError(f"cannot show {type(value).__name__} as JSON")
