"""`txstream etl`: run the warehouse ETL, and its maintenance batch job.

Spark is imported only when a command runs, so the rest of `txstream` starts fast.
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream_etl.config import (
    DRIVER_ROWS,
    WarehouseConfig,
    WarehouseConfigError,
    load_config,
)

app = typer.Typer(help="Warehouse ETL: committed topics into Delta tables with Spark.")
console = Console(stderr=True)
DEMO_APP = re.compile(r"^(leaderboard-demo-(\d+))\.changelog$")


def resolve_app(settings: Settings, app_name: str) -> str:
    """`latest` means the newest `make demo` app on the broker."""
    if app_name != "latest":
        return app_name
    demos = [m for t in TopicAdmin(settings).list_topics() if (m := DEMO_APP.match(t))]
    if not demos:
        console.print("[red]error:[/red] --app latest: no leaderboard-demo-* app on the broker")
        console.print("run `make demo` first, or name the app with --app")
        raise typer.Exit(2)
    return max(demos, key=lambda m: int(m.group(2))).group(1)


def load_warehouse(path: Path) -> WarehouseConfig:
    try:
        return load_config(path)
    except WarehouseConfigError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


CONFIG_HELP = (
    "the app's warehouse file (what to load, and into what), e.g. apps/leaderboard/warehouse.toml"
)


@app.command()
def run(
    app_name: str = typer.Option(..., "--app", help="the app whose topics to load; 'latest': "
                                 "the newest `make demo` app"),
    config: Path = typer.Option(..., "--config", help=CONFIG_HELP),
    once: bool = typer.Option(False, help="load what is committed now, then stop"),
    raw_topic: str = typer.Option("", help="also ingest raw vote events (CSV/JSON) from it"),
    trigger_s: float = typer.Option(1.0, help="seconds between micro-batches when streaming"),
    max_batches_per_trigger: int = typer.Option(
        0, help="atomic batches per micro-batch from stream topics; 0: all available"
    ),
    metrics: bool = typer.Option(True, help="serve Prometheus metrics, registered for scraping"),
    metrics_port: int = typer.Option(0, help="metrics port; 0: any free port"),
    metrics_host: str = typer.Option("127.0.0.1", help="address of the metrics endpoint"),
    split_drivers: bool = typer.Option(
        False, "--split-drivers/--one-driver",
        help="when streaming on a local master, run the mirrors' query in a second Spark "
        "driver at a lower CPU priority, so the facts' micro-batches get the CPU first (the "
        "mirrors lag more, and under a load that keeps the CPU busy, without bound)",
    ),
    mirrors_nice: int = typer.Option(19, min=0, max=19, help="the second driver's niceness"),
    driver_rows: int = typer.Option(
        DRIVER_ROWS, min=0, help="a fact table's micro-batch up to this many rows is appended by "
        "the driver (delta-rs, milliseconds), a larger one by Spark's executors; 0: always Spark",
    ),
    direct_read: bool = typer.Option(
        True, "--direct-read/--spark-read",
        help="a facts micro-batch small enough to collect into the driver is read from Kafka "
        "by the driver itself (the offsets Spark planned), not by a Spark job",
    ),
    second_of: int = typer.Option(0, hidden=True, help="run as the mirrors' driver of this pid"),
) -> None:  # fmt: skip
    """Stream the app's committed topics into Delta tables, exactly once."""
    from txstream.observability.targets import serve_metrics
    from txstream_etl.drivers import SecondDriver, follow, splits
    from txstream_etl.evolution import SchemaEvolutionError
    from txstream_etl.job import MirrorsAt, RunOptions, app_root
    from txstream_etl.job import run as run_job
    from txstream_etl.session import spark_session
    from txstream_etl.warehouse import latest_snapshot

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if second_of:
        follow(second_of, mirrors_nice)  # before Spark starts: its JVM inherits the niceness
    settings = Settings()
    warehouse = load_warehouse(config)
    app_name = resolve_app(settings, app_name)
    split = split_drivers and not second_of
    if split and not splits(warehouse, raw_topic or None, settings.spark_master, once):
        console.print(
            "[red]error:[/red] --split-drivers: only a streaming run (no --once) on a local "
            "master, of an app with mirrors and facts, has two drivers"
        )
        raise typer.Exit(2)
    if metrics:
        port = serve_metrics(settings, "etl", metrics_host, metrics_port)
        console.print(f"metrics on {metrics_host}:{port}/metrics")
    mirrors: MirrorsAt = "only" if second_of else "elsewhere" if split else "here"
    options = RunOptions(
        once, trigger_s, max_batches_per_trigger or None, mirrors, driver_rows, direct_read
    )
    second = None
    if split:  # the same command, for the mirrors alone; its metrics on a port of its own
        second = SecondDriver([
            sys.executable, "-m", "txstream_etl", "run", "--app", app_name,
            "--config", str(config.resolve()), "--trigger-s", str(trigger_s),
            "--max-batches-per-trigger", str(max_batches_per_trigger),
            "--raw-topic", raw_topic, "--metrics" if metrics else "--no-metrics",
            "--metrics-port", "0", "--metrics-host", metrics_host,
            "--mirrors-nice", str(mirrors_nice), "--second-of", str(os.getpid()),
        ])  # fmt: skip
    name = f"txstream-etl-{app_name}" + ("-mirrors" if second_of else "")
    spark = spark_session(settings, name)
    console.print(f"ETL of {app_name} into {app_root(settings, app_name)}")
    try:
        try:
            writers = run_job(
                spark, settings, app_name, warehouse, raw_topic or None, options,
                on_start=second.start if second is not None else None,
            )  # fmt: skip
        except SchemaEvolutionError as e:
            console.print(f"[red]error:[/red] {escape(str(e))}", highlight=False)
            raise typer.Exit(2) from None
        board = None
        if warehouse.snapshot is not None and warehouse.snapshot.show and mirrors != "elsewhere":
            board = latest_snapshot(spark, app_root(settings, app_name), warehouse.snapshot)
    finally:
        if second is not None:
            second.stop()
        spark.stop()
    status = second.exit_status() if second is not None else None
    if status is not None:
        console.print(f"[red]error:[/red] the mirrors' driver exited ({status}): stopped")
        raise typer.Exit(status)
    summary = Table(title=f"ETL of {app_name}")
    for column in ("query", "table", "rows", "quarantined", "freshness p50 / p99 s"):
        summary.add_column(column)
    for w in writers:
        fresh = sorted(w.stats.freshness_s)
        p = (
            f"{statistics.median(fresh):.2f} / {fresh[int(0.99 * (len(fresh) - 1))]:.2f}"
            if fresh
            else "-"
        )
        for table in sorted(w.tables):
            bad = sum(n for (t, _), n in w.stats.quarantined.items() if t == table)
            summary.add_row(w.query, table, str(w.stats.rows[table]), str(bad), p)
    Console().print(summary)
    if board is not None:
        Console().print(f"warehouse snapshot: {board}")


@app.command()
def backfill(
    app_name: str = typer.Option(..., "--app", help="the app whose warehouse to rebuild"),
    config: Path = typer.Option(..., "--config", help=CONFIG_HELP),
    into: str = typer.Option("", help="build the copy here and leave the warehouse as it is; "
                             "default: replace the app's warehouse once the copy is complete"),
) -> None:  # fmt: skip
    """Rebuild the app's warehouse from every committed record, from the topics' start.
    Stop `txstream etl run` for the app first; the replaced warehouse is kept aside."""
    from txstream_etl.backfill import BackfillError
    from txstream_etl.backfill import backfill as run_backfill
    from txstream_etl.session import spark_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings = Settings()
    warehouse = load_warehouse(config)
    app_name = resolve_app(settings, app_name)
    spark = spark_session(settings, f"txstream-etl-backfill-{app_name}")
    try:
        done = run_backfill(spark, settings, app_name, warehouse, into or None, console.print)
    except BackfillError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    finally:
        spark.stop()
    summary = Table(title=f"backfill of {app_name} into {done.root}")
    summary.add_column("table")
    summary.add_column("rows written", justify="right")
    for table, n in sorted(done.rows.items()):
        summary.add_row(table, str(n))
    Console().print(summary)


@app.command()
def maintain(
    app_name: str = typer.Option(..., "--app", help="the app whose warehouse to maintain"),
    config: Path = typer.Option(..., "--config", help=CONFIG_HELP),
) -> None:
    """Rebuild the aggregates, compact every table (OPTIMIZE) and VACUUM files older than
    each table's retention (`delta.deletedFileRetentionDuration`, 7 days)."""
    from txstream_etl.job import app_root
    from txstream_etl.maintenance import maintain as run_maintenance
    from txstream_etl.session import spark_session

    settings = Settings()
    warehouse = load_warehouse(config)
    app_name = resolve_app(settings, app_name)
    root = app_root(settings, app_name)
    spark = spark_session(settings, f"txstream-etl-maintain-{app_name}")
    try:
        report = run_maintenance(spark, root, warehouse)
    finally:
        spark.stop()
    for table, removed in sorted(report.compacted.items()):
        console.print(f"{table}: compacted {removed} files; vacuumed")
    for table, rows in sorted(report.aggregated.items()):
        console.print(f"{table}: {rows} rows")


@app.command()
def epoch(
    app_name: str = typer.Option(..., "--app", help="the app whose warehouse to read"),
    query: str = typer.Option("changelog", help="streams, changelog or ingest"),
    etl_batch: int = typer.Option(-1, help="the query's micro-batch; default: its newest"),
) -> None:
    """Print the Delta version of each of the query's tables as of one of its micro-batches,
    and Spark SQL views of them at those versions: tables read together, consistently."""
    from txstream_etl.epochs import NoSuchEpoch, sql_at
    from txstream_etl.epochs import epoch as find_epoch
    from txstream_etl.job import app_root

    settings = Settings()
    root = app_root(settings, resolve_app(settings, app_name))
    try:
        at = find_epoch(root, query, None if etl_batch < 0 else etl_batch)
    except (NoSuchEpoch, OSError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    console.print(f"{query} micro-batch {at.etl_batch}:")
    for name, version in sorted(at.versions.items()):
        console.print(f"  {name} version {version}")
    print(sql_at(root, query, at.etl_batch))


def main() -> None:
    """`spark-submit spark-jobs/etl.py run --app NAME`: the same commands."""
    app()
