"""`txstream worker run`: serve an app's partition engines until SIGTERM."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import typer

from txstream.commit.task import CommitPolicy
from txstream.config import Settings
from txstream.worker.runtime import Worker, load_app

app = typer.Typer(help="Run dataflow apps.", no_args_is_help=True)


@app.command()
def run(
    app_spec: str = typer.Option(..., "--app", help="module:factory returning the App"),
    params: str = typer.Option("{}", help="JSON object passed to the factory"),
    params_file: Path | None = typer.Option(None, help="JSON file passed to the factory"),
    partitions: str = typer.Option("0", help="comma-separated partitions to serve"),
    commit_interval_ms: int = typer.Option(100, help="group commit interval"),
    commit_max_batches: int = typer.Option(5000, help="group commit size limit"),
) -> None:
    """Serve the app's partition engines; exits non-zero if a commit fails."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        raw = params_file.read_text() if params_file is not None else params
        values = json.loads(raw)
        parts = [int(p) for p in partitions.split(",") if p.strip()]
        application = load_app(app_spec, values)
    except (json.JSONDecodeError, ValueError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    policy = CommitPolicy(interval_ms=commit_interval_ms, max_batches=commit_max_batches)
    worker = Worker(application, parts, Settings(), policy)
    worker.install_signal_handlers()
    worker.run()
