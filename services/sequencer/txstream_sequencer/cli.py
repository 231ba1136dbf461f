"""`txstream sequencer run`: turn raw events into sealed atomic batches until SIGTERM."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import FrameType

import typer
from pydantic import ValidationError

from txstream.config import Settings
from txstream.observability.targets import serve_metrics
from txstream_sequencer.config import load_config
from txstream_sequencer.runtime import Sequencer, SequencerError

app = typer.Typer(help="Seal raw events into atomic batches.", no_args_is_help=True)


@app.command()
def run(
    config: Path = typer.Option(
        ..., "--config", "-c", envvar="TXSTREAM_SEQUENCER_CONFIG", help="sequencer TOML file"
    ),
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
    sequencer = Sequencer(conf, settings)

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
