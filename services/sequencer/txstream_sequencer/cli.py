"""`txstream sequencer run`: turn raw events into sealed atomic batches until SIGTERM."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import FrameType

import typer
from pydantic import ValidationError

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.observability.targets import serve_metrics
from txstream.schemas import SchemaError
from txstream.sequencer_config import load_config
from txstream_sequencer.runtime import Sequencer, SequencerError

app = typer.Typer(help="Seal raw events into atomic batches.", no_args_is_help=True)


@app.command()
def run(
    config: Path = typer.Option(
        ..., "--config", "-c", envvar="TXSTREAM_SEQUENCER_CONFIG", help="sequencer TOML file"
    ),
    app_spec: str | None = typer.Option(
        None, "--app", help="module:app whose record types give the routes' schemas too"
    ),
    params: str = typer.Option("{}", help="the app's parameters, a JSON object (with --app)"),
    metrics: bool = typer.Option(True, help="serve Prometheus metrics, registered for scraping"),
    metrics_port: int = typer.Option(0, help="metrics port; 0: any free port"),
    metrics_host: str = typer.Option("127.0.0.1", help="address of the metrics endpoint"),
) -> None:
    """Run the configured routes; exits non-zero if Kafka refuses a commit."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        conf = load_config(config)
    except (OSError, ValueError, ValidationError) as e:
        typer.echo(f"error: {config}: {e}", err=True)
        raise typer.Exit(2) from e
    settings = Settings().as_service("sequencer")
    application = None if app_spec is None else app_or_exit(app_spec, params)
    try:
        registry = None if application is None else application.schema_registry(settings.schema_dir)
    except SchemaError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    sequencer = Sequencer(conf, settings, registry, application)

    def stop(signum: int, frame: FrameType | None) -> None:
        sequencer.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        sequencer.open()
    except SequencerError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if metrics:
        serve_metrics(settings, "sequencer", metrics_host, metrics_port)
    sequencer.run()
