"""`txstream sequencer run`: turn raw events into sealed atomic batches until SIGTERM."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from types import FrameType

import typer
from prometheus_client import start_http_server
from pydantic import ValidationError

from txstream.config import Settings
from txstream_sequencer.config import load_config
from txstream_sequencer.runtime import Sequencer, SequencerError

app = typer.Typer(help="Seal raw events into atomic batches.", no_args_is_help=True)


@app.command()
def run(
    config: Path = typer.Option(
        ..., "--config", "-c", envvar="TXSTREAM_SEQUENCER_CONFIG", help="sequencer TOML file"
    ),
    metrics_port: int = typer.Option(0, help="serve Prometheus metrics on 127.0.0.1:PORT"),
) -> None:
    """Run the configured routes; exits non-zero if Kafka refuses a commit."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        conf = load_config(config)
    except (OSError, ValueError, ValidationError) as e:
        typer.echo(f"error: {config}: {e}", err=True)
        raise typer.Exit(2) from e
    sequencer = Sequencer(conf, Settings())

    def stop(signum: int, frame: FrameType | None) -> None:
        sequencer.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        sequencer.open()
    except SequencerError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if metrics_port:
        start_http_server(metrics_port, addr="127.0.0.1")
    sequencer.run()
