"""`txstream verify`: replay an app's committed run through the serial reference."""

from __future__ import annotations

import typer
from rich.console import Console

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.testing.run_inputs import Unverifiable
from txstream.testing.verify import verify as run_verify


def verify(
    app_spec: str = typer.Option(..., "--app", help="module:factory (or module:app)"),
    params: str = typer.Option("{}", help="JSON object passed to the factory, as the workers'"),
) -> None:
    """Run the app's committed input again (batches and OLTP records) in the order its
    engines ran it, through its own procedures on an in-memory engine, and compare every
    table with what the engines committed, then check its aggregation constraints: "equal",
    or the first key that differs or the constraints broken (exit 1); and what it cannot
    see."""
    out = Console(stderr=True)
    application = app_or_exit(app_spec, params)
    settings = Settings()
    changelog = AppTopics(application.name).changelog
    partitions = len(TopicAdmin(settings).partitions(changelog))

    def shown(partition: int, batches: int) -> None:
        out.print(f"partition {partition}: {batches:,} batches and OLTP records replayed")

    try:
        verdict = run_verify(settings, application, partitions, shown)
    except Unverifiable as e:
        out.print(f"[red]error:[/red] {e}", markup=False)
        raise typer.Exit(2) from e
    if verdict.divergence is not None:
        typer.echo(verdict.divergence.text())
        raise typer.Exit(1)
    if verdict.broken:
        typer.echo("equal to the reference, but the committed tables break an aggregation "
                   "constraint:\n" + "\n".join(verdict.broken))  # fmt: skip
        raise typer.Exit(1)
    typer.echo(
        f"equal: {verdict.batches:,} batches and OLTP records on {verdict.partitions} "
        "partitions, every table as the engines committed it, every aggregation constraint met"
    )
    typer.echo("not seen by this check:\n" + "\n".join(f"- {u}" for u in verdict.unseen))
