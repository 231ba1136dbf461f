"""`txstream coordinator run`: the app's transaction coordinator, until SIGTERM."""

from __future__ import annotations

import json
import logging
import signal
from types import FrameType

import typer

from txstream.client import TxClient
from txstream.config import Settings
from txstream.model.app import load_app
from txstream.observability.targets import serve_metrics
from txstream.runtime.gc_freeze import freeze_startup_objects
from txstream_coordinator.console import ConsoleSources
from txstream_coordinator.gateway import serve
from txstream_coordinator.runtime import CoordinatorService

app = typer.Typer(help="Coordinate OLTP transactions and 2PC.", no_args_is_help=True)


@app.command()
def run(
    app_spec: str = typer.Option(..., "--app", help="module:factory of the App"),
    params: str = typer.Option("{}", help="app parameters as JSON"),
    http_port: int = typer.Option(0, help="serve the HTTP endpoint on HTTP_HOST:PORT"),
    http_host: str = typer.Option("127.0.0.1", help="address of the HTTP endpoint"),
    metrics: bool = typer.Option(True, help="serve Prometheus metrics, registered for scraping"),
    metrics_port: int = typer.Option(0, help="metrics port; 0: any free port"),
    metrics_host: str = typer.Option("127.0.0.1", help="address of the metrics endpoint"),
    resend_s: float = typer.Option(2.0, help="resend an unacknowledged decision after this"),
) -> None:
    """Serve transactions and queries for the app; restart it and it resolves what it
    left in doubt from its log. Run it twice or more for standbys: one serves at a time."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        application = load_app(app_spec, json.loads(params))
        if resend_s <= 0:
            raise ValueError(f"--resend-s must be positive, not {resend_s}")
    except (json.JSONDecodeError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    settings = Settings().as_service("coordinator")
    service = CoordinatorService(application, settings, resend_s)

    def stop(signum: int, frame: FrameType | None) -> None:
        service.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    service.open()
    if metrics:
        serve_metrics(settings, "coordinator", metrics_host, metrics_port)
    if http_port:
        console = ConsoleSources(application, settings, service.partitions, service.serving_machine)
        # Through the coordinator itself, which holds each request to its timeout: an HTTP
        # caller gets a definite answer (a direct call could still run after it gave up).
        client = TxClient(application.name, settings, direct=False)
        serve(client, http_host, http_port, settings.http_secret(), console)
        logging.getLogger(__name__).info(
            "HTTP on %s:%d, console at http://%s:%d/console",
            http_host,
            http_port,
            http_host,
            http_port,
        )
    freeze_startup_objects()
    service.run()
