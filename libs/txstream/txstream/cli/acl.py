"""`txstream acl apply`: grant each principal its rights on an app's topics."""

from __future__ import annotations

from typing import Annotated

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.markup import escape

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.kafka.acls import app_acls, describe, grant
from txstream.kafka.clients import common_config, error_text
from txstream.kafka.topics import AppTopics

app = typer.Typer(help="Access control on a secured cluster.", no_args_is_help=True)
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


@app.command()
def apply(
    app_spec: Annotated[str, typer.Option("--app", help="module:factory (or module:app)")],
    params: Annotated[str, typer.Option(help="JSON object passed to the factory")] = "{}",
) -> None:
    """Create the ACLs of the app's topics (existing ones stay), as the `admin` principal:
    only the coordinator may write requests and decisions; clients write inbound streams
    and OLTP requests only."""
    application = app_or_exit(app_spec, params)
    settings = Settings().as_service("admin")
    if not settings.secure:
        err.print("[red]error:[/red] the cluster is not secured (TXSTREAM_KAFKA_SECURITY=sasl_ssl)")
        raise typer.Exit(2)
    acls = app_acls(AppTopics(application.name), application.dataflow().border_streams)
    try:
        grant(AdminClient(common_config(settings)), acls)
    except (KafkaException, ValueError) as e:
        reason = error_text(e) if isinstance(e, KafkaException) else str(e)
        err.print(f"[red]error:[/red] {escape(reason)}")
        raise typer.Exit(1) from None
    for acl in acls:
        out.print(describe(acl))
