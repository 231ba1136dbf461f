"""Entry point: one Typer app, one module per command group."""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from txstream.cli import (
    acl,
    consume,
    describe,
    oltp,
    produce,
    schemas,
    stack,
    supervise,
    top,
    topics,
)

app = typer.Typer(
    name="txstream",
    help="Transactional stream processing on Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(stack.app, name="stack")
app.add_typer(topics.app, name="topics")
app.add_typer(schemas.app, name="schemas")
app.add_typer(acl.app, name="acl")
app.command()(produce.produce)
app.command()(consume.consume)
app.command()(oltp.call)
app.command()(oltp.query)
app.command()(top.top)
app.command()(describe.describe)
app.add_typer(supervise.app)  # merged: `txstream supervise`

# Services and applications add their own command groups (`txstream worker`,
# `txstream leaderboard`) through the `txstream.commands` entry point group, so the
# library never imports them.
for ep in entry_points(group="txstream.commands"):
    app.add_typer(ep.load(), name=ep.name)
