"""`txstream worker run`: serve the partitions Faust assigns of a dataflow app until SIGTERM."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import faust
import typer

from txstream import native
from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.cpus import CpuSetError, pin_self
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.published_schemas import publish
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.app import load_app
from txstream.model.declarations import RecoveryMode
from txstream.observability.targets import serve_metrics
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.direct_calls import TaskCalls
from txstream.runtime.gc_freeze import freeze_startup_objects
from txstream.runtime.reads import TaskReads
from txstream.schemas.codec import BatchCodec
from txstream_worker.agents import faust_app
from txstream_worker.queries import QueryEndpoint
from txstream_worker.slot import SlotHeld, WorkerSlot
from txstream_worker.task_manager import TaskManager

app = typer.Typer(help="Run dataflow apps.", no_args_is_help=True)
served: list[TaskManager] = []  # the worker's task manager, once made


def reads_of(partition: int) -> TaskReads | None:
    return served[0].reads_of(partition) if served else None


def calls_of(partition: int) -> TaskCalls | None:
    return served[0].calls_of(partition) if served else None


@app.command()
def run(
    app_spec: str = typer.Option(..., "--app", help="module:factory returning the App"),
    params: str = typer.Option("{}", help="JSON object passed to the factory"),
    params_file: Path | None = typer.Option(None, help="JSON file passed to the factory"),
    instance_id: str | None = typer.Option(
        None,
        envvar="TXSTREAM_WORKER_ID",
        help="this worker's slot (its static member id); default: the first free "
        "<host>-<n> slot on this host",
    ),
    commit_interval_ms: int = typer.Option(
        CommitPolicy.interval_ms,
        envvar="TXSTREAM_COMMIT_INTERVAL_MS",
        help="start a group commit once its oldest batch waited this long (and the commit "
        "before it is done)",
    ),
    commit_max_batches: int = typer.Option(
        CommitPolicy.max_batches,
        envvar="TXSTREAM_COMMIT_MAX_BATCHES",
        help="group commit size cap: processing waits for the commit in flight beyond it",
    ),
    commit_busy_interval_ms: int = typer.Option(
        CommitPolicy.busy_interval_ms,
        envvar="TXSTREAM_COMMIT_BUSY_INTERVAL_MS",
        help="while input is backed up, a group waits this long instead (fewer, larger "
        "commits under overload)",
    ),
    group_commit: bool = typer.Option(
        True, help="group many executions per commit; off: one commit per input batch"
    ),
    recovery: str | None = typer.Option(
        None, help="changelog, strong or weak; default: what the app declares"
    ),
    snapshot_every_batches: int = typer.Option(50_000, help="snapshot after this many batches"),
    snapshot_interval_s: float = typer.Option(600.0, help="snapshot after this many seconds"),
    loglevel: str = typer.Option("info", help="debug, info, warn or error"),
    metrics: bool = typer.Option(True, help="serve Prometheus metrics, registered for scraping"),
    metrics_port: int = typer.Option(0, help="metrics port; 0: any free port"),
    metrics_host: str = typer.Option("127.0.0.1", help="address of the metrics endpoint"),
    queries: bool = typer.Option(
        True, help="serve committed rows and read-only calls over HTTP (the query endpoint)"
    ),
    query_port: int = typer.Option(
        0, envvar="TXSTREAM_QUERY_PORT", help="query endpoint port; 0: any free port"
    ),
    query_host: str = typer.Option(
        "127.0.0.1", envvar="TXSTREAM_QUERY_HOST", help="address of the query endpoint"
    ),
) -> None:
    """Serve the app's procedure chains; exits non-zero if a commit fails."""
    try:
        raw = params_file.read_text() if params_file is not None else params
        application = load_app(app_spec, json.loads(raw))
        if commit_interval_ms <= 0 or commit_max_batches <= 0 or commit_busy_interval_ms < 0:
            raise ValueError(
                "--commit-interval-ms and --commit-max-batches must be positive, "
                "--commit-busy-interval-ms not negative"
            )
        policy = (
            CommitPolicy(commit_interval_ms, commit_max_batches, commit_busy_interval_ms)
            if group_commit
            else CommitPolicy.off()
        )
        mode = application.recovery if recovery is None else RecoveryMode.parse(recovery)
        recovery_policy = RecoveryPolicy(mode, snapshot_every_batches, snapshot_interval_s)
    except (json.JSONDecodeError, ValueError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    settings = Settings().as_service("worker")
    try:  # before any thread starts: each inherits the set
        pin_self(settings.worker_cpu_set, "worker_cpus")
    except CpuSetError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    ensure_app_topics(TopicAdmin(settings), application, settings.kafka_partitions)
    registry = application.schema_registry(settings.schema_dir)
    streams = application.decl.streams.values()
    publish(settings, AppTopics(application.name),
            {s.name: BatchCodec(registry.get(s.schema)) for s in streams})  # fmt: skip
    try:
        slot = WorkerSlot.claim(settings.data_dir / "workers" / application.name,
                                application.name, instance_id)  # fmt: skip
    except SlotHeld as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    typer.echo(f"worker slot {slot.instance_id} of app {application.name} (lock {slot.path}); "
               f"hot path {native.status()}", err=True)  # fmt: skip
    endpoint = None
    if queries:  # bound first: the worker names it in its group when it joins
        try:
            endpoint = QueryEndpoint(settings, application.name, reads_of, query_host,
                                     query_port, calls_of)  # fmt: skip
        except OSError as e:
            typer.echo(f"error: query endpoint {query_host}:{query_port}: {e}", err=True)
            raise typer.Exit(2) from e
    try:
        fapp = faust_app(application, settings, policy, recovery_policy, slot.instance_id,
                         None if endpoint is None else endpoint.client_id)  # fmt: skip
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    manager = fapp.txstream_tasks
    if endpoint is not None and manager is not None:
        served[:] = [manager]
        endpoint.start()
        typer.echo(f"query endpoint http://{endpoint.host}:{endpoint.port}", err=True)
    if metrics:
        serve_metrics(settings, "worker", metrics_host, metrics_port)
    logging.getLogger("txstream").setLevel(loglevel.upper().replace("WARN", "WARNING"))
    freeze_startup_objects()
    faust.Worker(fapp, loglevel=loglevel).execute_from_commandline()
