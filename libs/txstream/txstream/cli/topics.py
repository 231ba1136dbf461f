"""`txstream topics create|list|describe|delete|ensure`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.kafka.topics import ensure_app_topics

app = typer.Typer(help="Create, list, describe and delete Kafka topics.", no_args_is_help=True)
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_configs(pairs: list[str], compact: bool) -> dict[str, str]:
    """`k=v` options as a dict; `--compact` is shorthand for cleanup.policy=compact."""
    config: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="'--config'")
        config[key.strip()] = value.strip()
    if compact:
        policy = config.setdefault("cleanup.policy", "compact")
        if "compact" not in policy.split(","):
            raise typer.BadParameter(
                f"--compact contradicts --config cleanup.policy={policy}", param_hint="'--compact'"
            )
    return config


def fail(error: Exception) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(str(error))}")
    return typer.Exit(1)


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    partitions: Annotated[int, typer.Option(min=1, help="Number of partitions.")] = 1,
    replication_factor: Annotated[
        int | None,
        typer.Option(min=1, help="Replicas per partition; default: the cluster's default."),
    ] = None,
    compact: Annotated[bool, typer.Option(help="Log compaction (cleanup.policy=compact).")] = False,
    config: Annotated[
        list[str] | None,
        typer.Option("--config", "-c", metavar="KEY=VALUE", help="Topic config; repeatable."),
    ] = None,
) -> None:
    """Create a topic; fails if it already exists."""
    configs = parse_configs(config or [], compact)
    try:
        TopicAdmin(Settings()).create_topic(name, partitions, replication_factor, configs)
    except KafkaAdminError as e:
        raise fail(e) from e
    extra = "".join(f", {k}={v}" for k, v in sorted(configs.items()))
    out.print(f"created topic {name}: partitions={partitions}{extra}", markup=False)


@app.command("list")
def list_topics(
    internal: Annotated[bool, typer.Option(help="Include Kafka's internal topics.")] = False,
) -> None:
    """Topic names, one a line."""
    try:
        names = TopicAdmin(Settings()).list_topics(include_internal=internal)
    except KafkaAdminError as e:
        raise fail(e) from e
    for name in names:
        out.print(name, markup=False)


@app.command()
def describe(
    name: Annotated[str, typer.Argument(help="Topic name.")],
    all_config: Annotated[
        bool, typer.Option(help="Show every config value in force, not only overrides.")
    ] = False,
) -> None:
    """Partitions with leaders and offsets, and the topic's config."""
    try:
        topic = TopicAdmin(Settings()).describe_topic(name)
    except KafkaAdminError as e:
        raise fail(e) from e
    out.print(f"topic {topic.name}: partitions={len(topic.partitions)}", markup=False)
    table = Table("partition", "leader", "replicas", "isr", "start", "end", "stable")
    for p in topic.partitions:
        table.add_row(
            str(p.partition),
            str(p.leader),
            ",".join(map(str, p.replicas)),
            ",".join(map(str, p.isr)),
            str(p.start_offset),
            str(p.end_offset),
            str(p.stable_offset),
        )
    out.print(table)
    out.print("end = log end offset; stable = where read_committed readers stop", style="dim")
    shown = topic.effective_config if all_config else topic.config
    label = "config" if all_config else "config overrides"
    out.print(f"{label}:{'' if shown else ' none'}", markup=False)
    for key, value in shown.items():
        out.print(f"  {key}={value}", markup=False)


@app.command()
def delete(
    names: Annotated[list[str] | None, typer.Argument(help="Topics to delete.")] = None,
    prefix: Annotated[
        list[str] | None,
        typer.Option(help="Also every topic whose name starts with this; repeatable."),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Only list what would be deleted.")] = False,
) -> None:
    """Delete topics, and wait until the broker has: e.g. an app's, once its results are no
    longer needed. Runs leave their apps' topics behind, and a broker crowded with them
    collects garbage far more often and answers every client more slowly. Kafka's internal
    topics are never matched."""
    named, prefixes = set(names or []), tuple(prefix or [])
    if not named and not prefixes:
        err.print("[red]error:[/red] name the topics, or give --prefix")
        raise typer.Exit(2)
    if any(not p for p in prefixes):
        err.print("[red]error:[/red] an empty --prefix would match every topic")
        raise typer.Exit(2)
    try:
        admin = TopicAdmin(Settings())
        existing = admin.list_topics()
        missing = sorted(named - set(existing))
        if missing:
            err.print(f"[red]error:[/red] no such topic: {escape(', '.join(missing))}; "
                      "nothing deleted")  # fmt: skip
            raise typer.Exit(1)
        chosen = sorted(named | {t for t in existing if t.startswith(prefixes)})
        if not dry_run:
            admin.delete_topics(chosen)
    except KafkaAdminError as e:
        raise fail(e) from e
    for name in chosen:
        out.print(name, markup=False)
    verb = "would delete" if dry_run else "deleted"
    err.print(f"{verb} {len(chosen)} topic{'' if len(chosen) == 1 else 's'}")


@app.command()
def ensure(
    app_spec: Annotated[str, typer.Option("--app", help="module:factory (or module:app)")],
    params: Annotated[str, typer.Option(help="JSON object passed to the factory")] = "{}",
) -> None:
    """Create the topics an app needs, as its worker does on start (existing ones are left
    as they are), so that input can be sent before the first worker is up."""
    application = app_or_exit(app_spec, params)
    settings = Settings()
    try:
        names = ensure_app_topics(TopicAdmin(settings), application, settings.kafka_partitions)
    except KafkaAdminError as e:
        raise fail(e) from e
    for name in names:
        out.print(name, markup=False)
