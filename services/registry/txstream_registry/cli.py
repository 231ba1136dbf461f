"""`txstream registry run`: the schema registry, until SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

import typer
import uvicorn

from txstream.config import Settings
from txstream.observability.targets import serve_metrics
from txstream_registry.api import Registry, make_api
from txstream_registry.log import SchemaLog

app = typer.Typer(help="The schema registry (the Confluent API, for Avro).", no_args_is_help=True)
log = logging.getLogger(__name__)


@app.command()
def run(
    host: str = typer.Option("127.0.0.1", help="address to serve on"),
    port: int = typer.Option(8081, help="port to serve on (Confluent's default: 8081)"),
    metrics: bool = typer.Option(True, help="serve Prometheus metrics, registered for scraping"),
    metrics_port: int = typer.Option(0, help="metrics port; 0: any free port"),
    metrics_host: str = typer.Option("127.0.0.1", help="address of the metrics endpoint"),
) -> None:
    """Serve the registry. Its state is the Kafka topic txstream-registry.schemas: restart it
    and it serves the same ids; start a second one and the first stops."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = Settings()
    server: uvicorn.Server | None = None
    fenced = threading.Event()

    def on_fenced() -> None:
        log.error("another schema registry took over the log: stopping")
        fenced.set()
        if server is not None:
            server.should_exit = True

    registry = Registry(SchemaLog(settings), on_fenced)
    if metrics:
        serve_metrics(settings, "registry", metrics_host, metrics_port)
    config = uvicorn.Config(make_api(registry), host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)

    def stop(signum: int, frame: FrameType | None) -> None:
        assert server is not None
        server.should_exit = True

    signal.signal(signal.SIGTERM, stop)
    log.info(
        "schema registry on http://%s:%d (%d schemas)", host, port, len(registry.state.schemas)
    )
    server.run()
    if fenced.is_set():
        raise typer.Exit(1)
