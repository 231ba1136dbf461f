"""`txstream produce`: JSON lines in, Avro records out, all of them in one Kafka transaction.

Every line is parsed, checked and encoded before the first send, so one bad line costs nothing
and no transaction is even begun; the sends then share one transaction, so a crash part-way
leaves nothing visible to read_committed readers either.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from fastavro.types import Schema
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.engine.hops import PROGRESS
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.kafka.clients import (
    delivery_failure,
    error_text,
    send,
    transactional_producer_config,
)
from txstream.kafka.routing import RoutedSends, partition_of, span_places
from txstream.model.app import App
from txstream.model.declarations import Key
from txstream.schemas import BatchCodec, SchemaError, SchemaRegistry, find_error
from txstream.schemas.records import encode_record
from txstream.schemas.validation import shown

SCHEMA_HEADER = "txstream.schema"
PROGRESS_FROM = 10_000  # records; smaller inputs are done before a bar could help
TRANSACTION_TIMEOUT_S = 30.0

err = Console(stderr=True, highlight=False, soft_wrap=True)


class InputError(ValueError):
    """One input line that cannot be produced; the message names what is wrong."""


@dataclass(frozen=True)
class Encoded:
    key: bytes | None
    value: bytes
    tuples: int
    route: Key | None = None  # the key-field value as a routing key: placed by `partition_of`
    batch_id: int | None = None  # an envelope's
    everywhere: bool = False  # to every partition (a progress mark)
    # to these partitions, each copy with its Kafka key (a routed spanning batch, or a mark)
    copies: tuple[tuple[int, bytes | None], ...] | None = None
    mark: bool = False  # a progress mark, not a batch


Encoder = Callable[[Any], Encoded]


def produce(
    topic: Annotated[str, typer.Option("--topic", "-t", help="Topic to write to.")],
    schema: Annotated[
        str,
        typer.Option(
            "--schema",
            "-s",
            help="Full name of the record schema (the tuple schema with --envelope).",
        ),
    ],
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", exists=True, dir_okay=False, help="JSON lines; stdin when omitted."
        ),
    ] = None,
    key_field: Annotated[
        str | None, typer.Option(help="Record field whose value becomes the Kafka key.")
    ] = None,
    envelope: Annotated[
        str | None,
        typer.Option(
            metavar="STREAM",
            help='Lines are atomic batches {"batch_id": .., "tuples": [..]} of stream STREAM.',
        ),
    ] = None,
    broadcast: Annotated[
        bool,
        typer.Option(
            "--broadcast",
            help="Every batch to every partition (with --envelope): the input of a spanning "
            "procedure, which each partition engine must see whole.",
        ),
    ] = False,
    app_spec: Annotated[
        str | None,
        typer.Option("--app", help="module:app whose record types give --schema too."),
    ] = None,
    route: Annotated[
        bool,
        typer.Option(
            "--route",
            help="Each batch (with --envelope, of a spanning procedure's input of --app) only "
            "to the partitions owning a key it declares, then a progress mark of the highest "
            "id to every other partition.",
        ),
    ] = False,
    mark_progress: Annotated[
        bool,
        typer.Option(
            "--progress",
            help="After the batches, a progress mark to every partition (with --envelope): "
            "every batch up to the highest id is sent, so ordered repartitioned procedures "
            "need not wait for partitions that had no part of the last batches.",
        ),
    ] = False,
) -> None:
    """Produce JSON lines as Avro records, all in one transaction, or nothing if any is invalid."""
    if broadcast and (envelope is None or key_field is not None):
        err.print(
            "[red]error:[/red] --broadcast places every batch on every partition: it needs "
            "--envelope, and takes no --key-field"
        )
        raise typer.Exit(2)
    if mark_progress and envelope is None:
        err.print("[red]error:[/red] --progress marks batches: it needs --envelope")
        raise typer.Exit(2)
    if route and (broadcast or key_field is not None or envelope is None or app_spec is None):
        err.print(
            "[red]error:[/red] --route places each batch by the keys the app's spanning "
            "procedure declares: it needs --envelope and --app, and takes no --broadcast or "
            "--key-field"
        )
        raise typer.Exit(2)
    settings = Settings()
    application = None if app_spec is None else app_or_exit(app_spec)
    if (
        route
        and application is not None
        and envelope not in application.dataflow().spanning_streams
    ):
        spanning = ", ".join(application.dataflow().spanning_streams) or "none"
        err.print(f"[red]error:[/red] --route: stream {escape(repr(envelope))} is not a "
                  f"spanning procedure's input in app {application.name!r} (those: "
                  f"{spanning})")  # fmt: skip
        raise typer.Exit(2)
    try:
        registry = (
            SchemaRegistry(settings.schema_dir)
            if application is None
            else application.schema_registry(settings.schema_dir)
        )
    except SchemaError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(2) from e
    try:
        record_schema = registry.get(schema)
        encoder = (
            envelope_encoder(record_schema, envelope, key_field)
            if envelope is not None
            else plain_encoder(record_schema, key_field)
        )
    except SchemaError as e:
        raise typer.BadParameter(str(e), param_hint="'--schema'") from e
    try:
        partitions = len(TopicAdmin(settings).partitions(topic))
    except KafkaAdminError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from e

    try:
        lines = file.read_text(encoding="utf-8") if file else sys.stdin.read()
    except UnicodeDecodeError as e:
        err.print(f"[red]error:[/red] {escape(str(file or 'stdin'))} is not UTF-8 text: {e}")
        raise typer.Exit(2) from e
    numbered = list(enumerate(lines.splitlines(), start=1))
    with progress(len(numbered)) as bar:
        try:
            records = encode_lines(numbered, encoder, bar)
        except InputError as e:
            err.print(f"[red]error:[/red] {escape(str(e))}; nothing was produced")
            raise typer.Exit(2) from e
        if not records:
            err.print("the input has no records; nothing was produced")
            return
        if route and application is not None and envelope is not None:
            try:
                records = routed(records, record_schema, application, envelope, partitions)
            except InputError as e:
                err.print(f"[red]error:[/red] {escape(str(e))}; nothing was produced")
                raise typer.Exit(2) from e
        elif mark_progress:
            records.append(progress_mark(record_schema, records))
        headers: list[tuple[str, str | bytes | None]] = [(SCHEMA_HEADER, schema.encode())]
        try:
            send_in_one_transaction(settings, topic, records, headers, bar, partitions, broadcast)
        except KafkaException as e:
            reason = escape(f"nothing was committed to {topic}: {error_text(e)}")
            err.print(f"[red]error:[/red] {reason}")
            raise typer.Exit(1) from e
    tuples = sum(r.tuples for r in records)
    batches = sum(1 for r in records if not r.mark)
    what = (
        f"{plural(batches, 'batch')} ({plural(tuples, 'tuple')}) of stream {envelope}"
        if envelope is not None
        else plural(len(records), "record")
    )
    where = f"to every partition of {topic}" if broadcast else f"to {topic}"
    if route:
        where = f"to the partitions of {topic} they touch, with progress marks"
    elif mark_progress:
        where += f", and a progress mark at batch {records[-1].batch_id} to every partition"
    err.print(f"produced {what} {where} in one transaction", markup=False)


def progress_mark(tuple_schema: Schema, records: list[Encoded]) -> Encoded:
    """Every batch up to the highest id in `records` is sent (`engine.hops.PROGRESS`)."""
    top = max(r.batch_id for r in records if r.batch_id is not None)
    value = BatchCodec(tuple_schema).encode(PROGRESS, top, [])
    return Encoded(None, value, 0, batch_id=top, everywhere=True, mark=True)


def routed(
    records: list[Encoded], tuple_schema: Schema, app: App, stream: str, partitions: int
) -> list[Encoded]:
    """Each batch placed on the partitions owning a key it declares (`span_places`), then
    a progress mark of the highest id to each partition that did not get that batch."""
    codec, df = BatchCodec(tuple_schema), app.dataflow()
    out, sends = [], RoutedSends(partitions)
    for r in records:
        batch = codec.decode(r.value)
        try:
            places = span_places(df, stream, batch.tuples, partitions)
        except Exception as e:
            raise InputError(f"batch {batch.batch_id}: its touches cannot place it: "
                             f"{type(e).__name__}: {e}") from None  # fmt: skip
        # the leader's copy is keyed as such; the others keep the batch's own key
        copies = tuple((p, key or r.key) for p, key in sends.copies(batch.batch_id, places))
        out.append(Encoded(r.key, r.value, r.tuples, batch_id=r.batch_id, copies=copies))
    top = sends.top
    if top is not None and (behind := sends.behind(top)):
        mark = codec.encode(PROGRESS, top, [])
        copies = tuple((p, None) for p in behind)
        out.append(Encoded(None, mark, 0, batch_id=top, copies=copies, mark=True))
    return out


def plain_encoder(schema: Schema, key_field: str | None) -> Encoder:
    """Each line is one record of `schema`."""
    key_of = key_getter(schema, key_field)

    def encode(datum: Any) -> Encoded:
        problem = find_error(datum, schema)
        if problem:
            raise InputError(str(problem))
        key, route = key_of(datum)
        return Encoded(key, encode_record(schema, datum), 1, route)

    return encode


def envelope_encoder(tuple_schema: Schema, stream: str, key_field: str | None) -> Encoder:
    """Each line is one atomic batch; all its tuples must share the key."""
    codec = BatchCodec(tuple_schema)
    key_of = key_getter(tuple_schema, key_field)

    def encode(datum: Any) -> Encoded:
        if not isinstance(datum, dict):
            raise InputError(f'expected {{"batch_id": .., "tuples": [..]}}, got {shown(datum)}')
        if datum.get("stream", stream) != stream:
            raise InputError(f"field 'stream': {shown(datum['stream'])} is not {stream!r}")
        batch = {**datum, "stream": stream}
        problem = find_error(batch, codec.schema)
        if problem:
            raise InputError(str(problem))
        tuples = batch["tuples"]
        keyed = [key_of(t) for t in tuples]
        keys = [key for key, _ in keyed]
        for i, key in enumerate(keys[1:], start=1):
            if key != keys[0]:
                raise InputError(
                    f"field 'tuples[{i}].{key_field}': {shown(tuples[i].get(key_field))} differs "
                    f"from tuples[0]'s {shown(tuples[0].get(key_field))}; "
                    "a batch has one partition key"
                )
        value = codec.encode(stream, batch["batch_id"], tuples)
        key, route = keyed[0] if keyed else (None, None)
        return Encoded(key, value, len(keys), route, batch["batch_id"])

    return encode


def key_getter(
    schema: Schema, key_field: str | None
) -> Callable[[Any], tuple[bytes | None, Key | None]]:
    """A record's Kafka key (its `key_field` value, strings as UTF-8, others as JSON) and its
    routing key: keyed records go to the partition `partition_of` names, as the sequencer and
    OLTP place them, not where the client library's own key hash would."""
    if key_field is None:
        return lambda _: (None, None)
    fields = {f["name"]: f for f in schema.get("fields", ())} if isinstance(schema, dict) else {}
    if key_field not in fields:
        name = schema["name"] if isinstance(schema, dict) else schema
        raise typer.BadParameter(
            f"{key_field!r} is not a field of {name}; fields: {', '.join(fields) or 'none'}",
            param_hint="'--key-field'",
        )
    default = fields[key_field].get("default")

    def key_of(record: Any) -> tuple[bytes | None, Key | None]:
        value = record.get(key_field, default)
        if value is None:
            return None, None
        try:
            partition_of((value,), 1)
        except (TypeError, ValueError) as e:
            raise InputError(f"field {key_field!r}: {shown(value)} is no partition key: {e}") from e
        key = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        return key, (value,)

    return key_of


def encode_lines(numbered: list[tuple[int, str]], encoder: Encoder, bar: Progress) -> list[Encoded]:
    """Every non-blank line encoded, or InputError naming the first bad line."""
    task = bar.add_task("checking", total=len(numbered))
    records = []
    for number, line in numbered:
        bar.advance(task)
        if not line.strip():
            continue
        try:
            datum = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"line {number}: malformed JSON at column {e.colno}: {e.msg}") from e
        try:
            records.append(encoder(datum))
        except InputError as e:
            raise InputError(f"line {number}: {e}") from e
    return records


def send_in_one_transaction(
    settings: Settings,
    topic: str,
    records: list[Encoded],
    headers: list[tuple[str, str | bytes | None]],
    bar: Progress,
    partitions: int,
    broadcast: bool = False,
) -> None:
    """Send every record in one transaction (`broadcast`: each to every partition); on any
    failure abort it and re-raise."""
    task = bar.add_task(
        "producing",
        total=sum(
            partitions if broadcast or r.everywhere else len(r.copies or (0,)) for r in records
        ),
    )
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _: Message) -> None:
        if error is None:
            bar.advance(task)
        else:
            failures.append(error)

    # A fresh transactional.id per run: concurrent runs must not fence each other.
    config = transactional_producer_config(settings, f"txstream-produce-{uuid.uuid4().hex}")
    producer = Producer(config)
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    producer.begin_transaction()
    try:
        for r in records:
            copies: list[tuple[int | None, bytes | None]]
            if broadcast or r.everywhere:
                copies = [(p, r.key) for p in range(partitions)]
            elif r.copies is not None:
                copies = list(r.copies)
            elif r.route is None:
                copies = [(None, r.key)]  # the producer's partitioner places it
            else:
                copies = [(partition_of(r.route, partitions), r.key)]
            for partition, key in copies:
                placed = {} if partition is None else {"partition": partition}
                send(producer, topic, r.value, key=key, on_delivery=delivered,
                     headers=headers, **placed)  # fmt: skip
            producer.poll(0)
        producer.flush(TRANSACTION_TIMEOUT_S)
        if failures:
            raise delivery_failure(producer, failures, TRANSACTION_TIMEOUT_S)
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    except BaseException:
        with suppress(KafkaException):
            producer.abort_transaction(TRANSACTION_TIMEOUT_S)
        raise


def progress(total: int) -> Progress:
    """A bar on a terminal's stderr for large inputs only; it vanishes when done."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=total < PROGRESS_FROM or not err.is_terminal,
    )


def plural(n: int, noun: str) -> str:
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun}es" if noun.endswith("ch") else f"{n} {noun}s"
