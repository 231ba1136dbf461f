"""Entry point: one Typer app, one module per command group."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from typing import Any

import typer
from pydantic import ValidationError

from txstream.cli import (
    acl,
    consume,
    describe,
    oltp,
    produce,
    run,
    schemas,
    send,
    stack,
    supervise,
    top,
    topics,
    verify,
)
from txstream.config import Settings


class _Txstream(typer.Typer):
    """The command, with bad settings told in a line each rather than a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except ValidationError as e:
            if e.title != Settings.__name__:
                raise
            for error in e.errors():
                name = ".".join(str(part) for part in error["loc"])
                given = error.get("input")
                print(
                    f"error: setting {name} (TXSTREAM_{name.upper()} or the settings file): "
                    f"{error['msg']}, got {given!r}",
                    file=sys.stderr,
                )
            sys.exit(2)


app = _Txstream(
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
app.command()(send.send)
app.command()(run.run)
app.command()(consume.consume)
app.command()(oltp.call)
app.command()(oltp.query)
app.command()(top.top)
app.command()(describe.describe)
app.command()(verify.verify)
app.add_typer(supervise.app)  # merged: `txstream supervise`

# Services and applications add their own command groups (`txstream worker`,
# `txstream leaderboard`) through the `txstream.commands` entry point group, so the
# library never imports them. One whose module cannot be imported (a distribution removed
# but for its metadata, say) is left out, named on stderr: the other commands still work.
for ep in entry_points(group="txstream.commands"):
    try:
        app.add_typer(ep.load(), name=ep.name)
    except ImportError as e:
        print(f"txstream: command {ep.name!r} left out: {ep.value} cannot be imported ({e})",
              file=sys.stderr)  # fmt: skip
