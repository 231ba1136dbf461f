"""`txstream call` and `txstream query`: OLTP transactions and table queries from a shell.

Both go through the app's coordinator (which must be running) and print JSON. `call`
exits 1 when the transaction aborts, and 2 for a bad request.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from txstream.client import OltpTimeout, TxClient
from txstream.oltp.messages import (
    ISOLATIONS,
    Fragment,
    TxnResult,
    fragments_from_json,
    key_of,
)
from txstream.oltp.predicates import parse_aggregate, parse_condition


def _key(text: str) -> list[Any]:
    """A key as JSON (`[1]`, `[\"a\", 2]`) or a bare int or string (`1`, `alice`)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    return list(key_of(json.dumps(value if isinstance(value, list) else [value])))


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _fragments(
    procedure: str | None, key: str | None, params: str, fragments: str | None
) -> list[Fragment]:
    if fragments is not None:
        frags = fragments_from_json(json.loads(fragments))
        if not frags:
            raise ValueError('--fragments must list at least one {"key", "procedure", "params"}')
        return frags
    if procedure is None or key is None:
        raise ValueError("give --procedure and --key, or --fragments")
    args = json.loads(params)
    if not isinstance(args, dict):
        raise ValueError(f"--params must be a JSON object, not {params!r}")
    return [Fragment(json.dumps(_key(key)), procedure, json.dumps(args))]


def _print(result: TxnResult) -> None:
    typer.echo(
        json.dumps(
            {
                "status": result.status,
                "txn_id": result.txn_id,
                "reason": result.reason,
                "detail": result.detail,
                "results": result.values(),
                "partitions": result.partitions,
            }
        )
    )


def call(
    app: str = typer.Option(..., "--app", help="the app's name"),
    procedure: str | None = typer.Option(None, help="a registered transaction"),
    key: str | None = typer.Option(None, help="the key that routes it, e.g. 1 or [1]"),
    params: str = typer.Option("{}", help="its parameters, a JSON object"),
    fragments: str | None = typer.Option(
        None, help='several fragments as one transaction: [{"key", "procedure", "params"}]'
    ),
    timeout_s: float = typer.Option(10.0, help="abort if not decided within this"),
) -> None:
    """Run one OLTP transaction and print its outcome as JSON."""
    try:
        frags = _fragments(procedure, key, params, fragments)
    except (ValueError, KeyError, TypeError) as e:
        raise _fail(str(e)) from e
    try:
        with TxClient(app, timeout_s=timeout_s) as client:
            result = client.call(frags)
    except OltpTimeout as e:
        raise _fail(str(e), 1) from e
    _print(result)
    if result.status != "committed":
        raise typer.Exit(2 if result.status == "failed" else 1)


def query(
    app: str = typer.Option(..., "--app", help="the app's name"),
    table: str = typer.Option(..., help="the table to read"),
    key: str | None = typer.Option(None, help="one key, e.g. 1 or [1]; else every row"),
    where: list[str] = typer.Option([], help="a condition like balance<10 (repeatable)"),
    agg: list[str] = typer.Option([], help="count, or fn:field with fn sum|min|max (repeatable)"),
    isolation: str = typer.Option(
        "snapshot",
        help="read_committed, snapshot or serializable (the last two: one batch on every engine)",
    ),
    timeout_s: float = typer.Option(10.0, help="give up after this"),
) -> None:
    """Read a table (a JSON line per row), consistent across partitions with snapshot."""
    try:
        k = None if key is None else tuple(_key(key))
        conditions = [parse_condition(w) for w in where]
        aggregates = [parse_aggregate(a) for a in agg]
        if isolation not in ISOLATIONS:
            raise ValueError(
                f"--isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}"
            )
    except ValueError as e:
        raise _fail(str(e)) from e
    try:
        with TxClient(app, timeout_s=timeout_s) as client:
            result = client.query(table, k, conditions, isolation, aggregates)
    except OltpTimeout as e:
        raise _fail(str(e), 1) from e
    if result.status != "committed":
        raise _fail(f"{result.reason}: {result.detail}")
    if result.at is not None:
        typer.echo(f"as of batch {result.at} of the spanning stream, on every partition", err=True)
    for row_key, row in result.table_rows():
        typer.echo(json.dumps({"key": list(row_key), "row": row}))
