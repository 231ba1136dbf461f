"""`txstream bank run`: the bank transfer workload, with optional crashes."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from bank.run import BankConfig, BankRun, summary
from txstream.config import Settings
from txstream.stack.stack import Stack

app = typer.Typer(help="TSpoon's bank transfers.", no_args_is_help=True)


@app.command()
def run(
    accounts: int = typer.Option(100_000, help="accounts, each opened with 100"),
    transfers: int = typer.Option(10_000, help="transfers of 1..100 between random accounts"),
    partitions: int = typer.Option(4, help="partition engines the accounts are spread over"),
    workers: int = typer.Option(2, help="worker processes serving the partitions"),
    in_flight: int = typer.Option(64, help="transfers the client keeps outstanding"),
    seed: int = typer.Option(1, help="seed of the transfer sequence"),
    kill_coordinator: int = typer.Option(0, help="SIGKILL the coordinator this many times"),
    kill_worker: int = typer.Option(0, help="SIGKILL a worker this many times"),
    name: str = typer.Option("bank", help="app name; a new name starts from scratch"),
    mix: str = typer.Option("uniform", help="uniform pairs, or only single- or multi-partition"),
    report: Path | None = typer.Option(None, help="write the full report here as JSON"),
) -> None:
    """Run the transfers with concurrent snapshot checks; exits 1 if money was not
    conserved or a balance went negative."""
    try:
        config = BankConfig(
            accounts,
            transfers,
            partitions,
            workers,
            in_flight,
            seed,
            kill_coordinator,
            kill_worker,
            name=name,
            mix=mix,
        )
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    # SIGTERM unwinds like Ctrl-C, so the services this run started are stopped.
    signal.signal(signal.SIGTERM, lambda signo, frame: sys.exit(128 + signo))
    settings = Settings()
    Stack(settings).up_kafka(lambda line: typer.echo(line, err=True))
    with Progress("transfers", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()) as bar:
        task = bar.add_task("transfers", total=transfers)
        result = BankRun(config, settings).run(lambda done, total: bar.update(task, completed=done))
    for line in summary(result):
        typer.echo(line)
    if report is not None:
        report.write_text(json.dumps(result.to_json(), indent=2, default=str))
    if result.violations():
        raise typer.Exit(1)
