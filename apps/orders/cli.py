"""`txstream orders run`: the order pipeline end to end on the real stack (workload spec)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress as Bar
from rich.progress import TaskID

from orders.files import InputError, Shop
from orders.reference import invariants
from orders.run import OrdersRun, Progress, RunConfig
from txstream.config import Settings
from txstream.stack.stack import Stack

app = typer.Typer(help="The order pipeline: orders, restocks and top-ups across partitions.")
console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def run(
    items: Path = typer.Option(..., help="items file: 'item_id price initial_stock'"),
    customers: Path = typer.Option(..., help="customers file: 'customer_id initial_balance'"),
    events: Path = typer.Option(
        ..., help="events file: 'O order customer item qty', 'R item qty', 'T customer amount'"
    ),
    result: Path = typer.Option(..., help="where to write the result document (JSON)"),
    batch_size: int = typer.Option(1, help="K: events per atomic batch"),
    partitions: int = typer.Option(4, help="P: partitions of every stage's topic"),
    workers: int = typer.Option(1, help="W: worker processes"),
    timeout_s: float = typer.Option(3600, help="give up after this many seconds"),
) -> None:
    """Run the workload and write the result document read back from committed state;
    exits 1 if the result breaks an invariant of the workload."""
    try:
        config = RunConfig(batch_size, partitions, workers, timeout_s)
        shop = Shop.read(items, customers, events)
    except InputError as e:
        raise _fail(f"{e}; nothing was loaded") from e
    except ValueError as e:
        raise _fail(str(e)) from e
    # SIGTERM unwinds like Ctrl-C, so the workers this run started are stopped.
    signal.signal(signal.SIGTERM, lambda signo, frame: sys.exit(128 + signo))
    settings = Settings()
    Stack(settings).up_kafka(console.print)
    orders = OrdersRun(shop, config, settings)
    with Bar(console=console, transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def phase(what: str, total: int | None) -> None:
            if "load" in tasks:
                bar.remove_task(tasks["load"])
            tasks["load"] = bar.add_task(what, total=total)
            if total is not None:
                tasks["commit"] = bar.add_task("committed event batches", total=total)

        report = orders.run(
            Progress(
                phase=phase,
                loaded=lambda n: bar.update(tasks["load"], completed=n),
                committed=lambda n: bar.update(tasks["commit"], completed=n),
                reading=lambda what: bar.update(tasks["load"], description=what),
            )
        )
    doc = report.result.to_json()
    doc["app"] = report.app
    tmp = result.with_name(result.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, result)
    print(f"{report.summary()}; result in {result}")
    broken = invariants(shop, report.result)
    for problem in broken:
        console.print(f"[red]invariant broken:[/red] {escape(problem)}", soft_wrap=True)
    if broken:
        raise typer.Exit(1)
