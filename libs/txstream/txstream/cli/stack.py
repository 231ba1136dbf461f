"""`txstream stack up|down|status`: the native local stack."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from txstream.config import Settings
from txstream.stack.broker import BrokerError
from txstream.stack.prometheus import PrometheusError
from txstream.stack.stack import Stack, State

app = typer.Typer(help="Start, stop and inspect the native local stack.", no_args_is_help=True)
console = Console()


@app.command()
def up() -> None:
    """Start every component that is not running; a no-op when all are."""
    try:
        Stack(Settings()).up(console.print)
    except (BrokerError, PrometheusError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(1) from e


@app.command()
def down() -> None:
    """Stop every component by pid."""
    Stack(Settings()).down(console.print)


@app.command()
def status() -> None:
    """Show each component; exits 1 when any component is down or dead."""
    rows = Stack(Settings()).status()
    table = Table("component", "state", "pid", "detail")
    colour = {State.RUNNING: "green", State.STOPPED: "yellow", State.DEAD: "red"}
    for r in rows:
        table.add_row(r.name, f"[{colour[r.state]}]{r.state.value}[/]", str(r.pid or "-"), r.detail)
    console.print(table)
    if any(r.state is not State.RUNNING for r in rows):
        raise typer.Exit(1)
