"""`txstream leaderboard run`: the workload end to end on the real stack (workload spec)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable
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
    typed_records: bool = typer.Option(
        False, help="declare the records as Python types (leaderboard.records), not .avsc names"
    ),
    preload: bool = typer.Option(
        False,
        help="load every vote before the worker starts, and time from the first committed "
        "batch to the last (how the peers benchmark times a system reading a loaded topic)",
    ),
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
    if preload and via_sequencer:
        console.print("[red]error:[/red] --preload loads the votes stream, not the sequencer's")
        raise typer.Exit(2)
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
    lb = build_app(params, name=f"leaderboard-{uuid.uuid4().hex[:10]}", recovery=recovery,
                   typed=typed_records)  # fmt: skip
    topics = AppTopics(lb.name)
    loader = Loader(settings, lb)
    loader.load_reference_data()
    worker = Supervised(
        "worker",
        [str(Path(sys.executable).with_name("txstream")), "worker", "run",
         "--app", "leaderboard.dataflow:from_params",
         "--params", json.dumps({**asdict(params), "name": lb.name, "recovery": recovery,
                                 "typed": typed_records}),
         *([] if group_commit else ["--no-group-commit"])],
        settings,
        policy=Policy(max_restarts=100, window_s=60.0),
    )  # fmt: skip
    services = [worker]
    if via_sequencer:
        services.append(_sequencer(settings, lb.name))

    def alive() -> bool:
        return all(s.supervisor.live_pid() is not None for s in services)

    batches = -(-count // batch_size)
    with Progress(console=console, transient=True) as progress:
        loading = progress.add_task("loading batches", total=batches)
        committing = progress.add_task("committed batches", total=batches)
        clock = _Clock(lambda n: progress.update(committing, completed=n))

        def load() -> int:
            def loaded(n: int) -> None:
                progress.update(loading, completed=n)

            if via_sequencer:
                total = load_raw_votes(settings, _raw_topic(lb.name), votes, batch_size, loaded)
            else:
                total = loader.load_votes(votes, batch_size, progress=loaded)
            progress.update(loading, completed=total)
            return total

        total = load() if preload else 0
        try:
            for service in services:
                service.start()
            reference = {"contestant_rows": 1, "area_code_rows": 1}
            wait_for_batches(settings, topics.commits, reference, timeout_s, alive)
            if not preload:
                clock.start(0)
                total = load()
            wait_for_batches(
                settings, topics.commits, {"votes": total}, timeout_s, alive, progress=clock.seen
            )
            timed, elapsed = clock.stop(total)
            restarts = worker.restarts()
        finally:
            for service in reversed(services):
                service.stop()
    doc = result_document(recovered_tables(settings, lb))
    doc["app"] = lb.name
    tmp = result.with_name(result.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, result)
    rate = f"{timed / elapsed:,.0f}" if timed and elapsed > 0 else "n/a (too few to time)"
    print(
        f"{timed} batches in {elapsed:.2f}s = {rate} batches/s"
        f" (worker restarts: {restarts}); result in {result}"
    )


class _Clock:
    """Times the run: from the first vote batch sent, or with everything preloaded from the
    first commit of vote batches (those batches then not counted), to the last commit."""

    def __init__(self, progress: Callable[[int], None]) -> None:
        self.progress = progress
        self.started: float | None = None
        self.first = 0

    def start(self, first: int) -> None:
        self.started, self.first = time.monotonic(), first

    def seen(self, done: dict[str, int]) -> None:
        committed = done.get("votes", 0)
        if self.started is None and committed:
            self.start(committed)
        self.progress(committed)

    def stop(self, total: int) -> tuple[int, float]:
        """(batches timed, seconds)."""
        assert self.started is not None
        return total - self.first, time.monotonic() - self.started


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
