"""`txstream send`: plain rows (JSON lines) to an app's border stream, as atomic batches.

Every row is read and checked against the stream's schema before anything is sent; the
batches then go in one Kafka transaction (`BatchProducer`), so a bad row or a failure
part-way leaves nothing for a reader to see. A batch closes at `--batch-size` rows, and,
on a keyed stream, where the key changes: a batch goes to one partition.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError
from txstream.kafka.clients import error_text
from txstream.producer import BatchError, BatchProducer


def send(
    app_spec: Annotated[str, typer.Option("--app", help="module:app (or module:factory)")],
    stream: Annotated[str, typer.Option("--stream", "-s", help="The border stream to feed.")],
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            exists=True,
            dir_okay=False,
            help="JSON lines, a row each; stdin when omitted.",
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows per batch at most.")] = 1000,
    params: Annotated[str, typer.Option(help="JSON object passed to a factory.")] = "{}",
) -> None:
    """Send rows to a stream as atomic batches, all in one transaction, or nothing."""
    application = app_or_exit(app_spec, params)
    text = file.read_text(encoding="utf-8") if file else sys.stdin.read()
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            typer.echo(f"error: line {number}: malformed JSON at column {e.colno}: {e.msg}; "
                       "nothing was sent", err=True)  # fmt: skip
            raise typer.Exit(2) from None
        if not isinstance(row, dict):
            typer.echo(f"error: line {number}: a row is a JSON object; nothing was sent", err=True)
            raise typer.Exit(2)
        rows.append(row)
    declared = application.decl.streams.get(stream)
    key = declared.key_field if declared is not None else None
    batches = _batches(rows, batch_size, key)
    try:
        with BatchProducer(application, Settings()) as producer:
            for batch in batches:  # checked before the transaction begins
                producer.check(stream, batch)
            with producer.transaction():
                ids = [producer.send(stream, batch) for batch in batches]
    except BatchError as e:
        typer.echo(f"error: {e}; nothing was sent", err=True)
        raise typer.Exit(2) from None
    except (KafkaException, KafkaAdminError) as e:
        reason = error_text(e) if isinstance(e, KafkaException) else str(e)
        typer.echo(f"error: nothing was committed to stream {stream!r}: {reason}", err=True)
        raise typer.Exit(1) from None
    if not ids:
        typer.echo("the input has no rows; nothing was sent", err=True)
        return
    span = f"batch {ids[0]}" if len(ids) == 1 else f"batches {ids[0]}-{ids[-1]}"
    typer.echo(f"sent {len(rows)} rows as {span} of stream {stream!r} in one transaction",
               err=True)  # fmt: skip


def _batches(rows: list[dict[str, Any]], size: int, key: str | None) -> list[list[dict[str, Any]]]:
    out: list[list[dict[str, Any]]] = []
    for row in rows:
        last = out[-1] if out else None
        if last is None or len(last) >= size or (key and last[0].get(key) != row.get(key)):
            out.append([row])
        else:
            last.append(row)
    return out
