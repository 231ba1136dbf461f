"""`txstream leaderboard run`: the workload end to end on the real stack (workload spec)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress

from leaderboard.commits import recovered_tables, wait_for_batches
from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader, load_raw_votes
from leaderboard.results import result_document
from leaderboard.votes_file import VotesFileError, validate_votes_file
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import RecoveryMode
from txstream.stack.stack import Stack
from txstream.stack.supervisor import Policy, Supervised

app = typer.Typer(help="The Leaderboard Maintenance workload (S-Store VLDB'15).")
console = Console(stderr=True)


def _positive(name: str, value: int) -> None:
    if value < 1:
        console.print(f"[red]error:[/red] {name} must be at least 1, got {value}")
        raise typer.Exit(2)


@app.command()
def run(
    votes: Path = typer.Option(..., help="votes file: 'vote_id phone_number contestant_number'"),
    result: Path = typer.Option(..., help="where to write the result document (JSON)"),
    contestants: int = typer.Option(50, help="N: contestants numbered 1..N"),
    threshold: int = typer.Option(20000, help="T: remove the lowest every T accepted votes"),
    max_votes: int = typer.Option(1, help="M: votes allowed per phone number"),
    window: int = typer.Option(100, help="W: trending window size (ROWS W)"),
    slide: int = typer.Option(10, help="S: trending window slide (SLIDE S)"),
    batch_size: int = typer.Option(1, help="K: votes per atomic batch"),
    timeout_s: float = typer.Option(3600, help="give up after this many seconds"),
    via_sequencer: bool = typer.Option(
        False, help="send votes as plain JSON events, one per record, through the sequencer"
    ),
    recovery: str = typer.Option("changelog", help="recovery mode: changelog, strong or weak"),
    group_commit: bool = typer.Option(True, help="off: one commit per batch"),
) -> None:
    """Run the workload and write the result document read back from committed state."""
    for name, value in (("--contestants", contestants), ("--threshold", threshold),
                        ("--max-votes", max_votes), ("--window", window), ("--slide", slide),
                        ("--batch-size", batch_size)):  # fmt: skip
        _positive(name, value)
    try:
        RecoveryMode.parse(recovery)
    except ValueError as e:
        console.print(f"[red]error:[/red] --recovery: {e}")
        raise typer.Exit(2) from e
    if slide > window:
        console.print(f"[red]error:[/red] --slide {slide} must not exceed --window {window}")
        raise typer.Exit(2)
    try:
        count = validate_votes_file(votes)
    except (VotesFileError, OSError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from e

    settings = Settings()
    Stack(settings).up_kafka(console.print)
    params = Params(contestants, threshold, max_votes, window, slide)
    lb = build_app(params, name=f"leaderboard-{uuid.uuid4().hex[:10]}", recovery=recovery)
    topics = AppTopics(lb.name)
    loader = Loader(settings, lb)
    loader.load_reference_data()
    worker = Supervised(
        "worker",
        [str(Path(sys.executable).with_name("txstream")), "worker", "run",
         "--app", "leaderboard.dataflow:from_params",
         "--params", json.dumps({**asdict(params), "name": lb.name, "recovery": recovery}),
         *([] if group_commit else ["--no-group-commit"])],
        settings,
        policy=Policy(max_restarts=100, window_s=60.0),
    )  # fmt: skip
    services = [worker]
    if via_sequencer:
        services.append(_sequencer(settings, lb.name))

    def alive() -> bool:
        return all(s.supervisor.live_pid() is not None for s in services)

    try:
        for service in services:
            service.start()
        reference = {"contestant_rows": 1, "area_code_rows": 1}
        wait_for_batches(settings, topics.commits, reference, timeout_s, alive)
        started = time.monotonic()
        batches = -(-count // batch_size)
        with Progress(console=console, transient=True) as progress:
            loading = progress.add_task("loading batches", total=batches)
            committing = progress.add_task("committed batches", total=batches)

            def loaded(n: int) -> None:
                progress.update(loading, completed=n)

            if via_sequencer:
                total = load_raw_votes(settings, _raw_topic(lb.name), votes, batch_size, loaded)
            else:
                total = loader.load_votes(votes, batch_size, progress=loaded)
            progress.update(loading, completed=total)
            wait_for_batches(
                settings,
                topics.commits,
                {"votes": total},
                timeout_s,
                alive,
                progress=lambda done: progress.update(committing, completed=done.get("votes", 0)),
            )
        elapsed = time.monotonic() - started
        restarts = worker.restarts()
    finally:
        for service in reversed(services):
            service.stop()
    doc = result_document(recovered_tables(settings, lb))
    doc["app"] = lb.name
    tmp = result.with_name(result.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, result)
    print(
        f"{total} batches in {elapsed:.2f}s = {total / elapsed:,.0f} batches/s"
        f" (worker restarts: {restarts}); result in {result}"
    )


def _raw_topic(app_name: str) -> str:
    return f"{app_name}.raw_votes"


def _sequencer(settings: Settings, app_name: str) -> Supervised:
    """The sequencer that seals the raw vote events into the app's votes stream."""
    raw = _raw_topic(app_name)
    TopicAdmin(settings).create_topic(raw, 1)
    config = settings.run_dir / f"sequencer-{app_name}.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'name = "{app_name}"\n[[routes]]\ntopic = "{raw}"\napp = "{app_name}"\n'
        'stream = "votes"\nschema = "leaderboard.Vote"\nbatch_id_field = "batch_id"\n'
        "seal_after_ms = 50\n"
    )
    argv = [str(Path(sys.executable).with_name("txstream")), "sequencer", "run",
            "--config", str(config)]  # fmt: skip
    return Supervised("sequencer", argv, settings, policy=Policy(max_restarts=100, window_s=60.0))
