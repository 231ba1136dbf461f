"""What other work between batches costs the next Leaderboard batch on this machine.

    .venv/bin/python -m bench.interleave --votes 20000 --between none,sleep,python,c

A live worker runs a batch, then waits in `poll` while librdkafka's, the commit thread's
and the broker's threads run; a backed-up one runs batches back to back. A live batch cost
the worker about twice a backed-up one in every thread (docs/performance-history.md, 2026-11-29),
and its code path is the same. This runs the engine alone (`engine_bench`'s path, no
Kafka), and before each batch does one of these, picked at random per batch, so the
machine's drifts fall on all alike:
- none: nothing, back to back;
- sleep: sleeps PAUSE_S, off the CPU as a live worker is between records;
- python: PAUSE_S of other Python (a loop on the clock);
- c: work in C of about that length (a sum over a range of ints).
Only the batch is timed (its decode and TEs, and the group commit every --group batches):
wall clock, which on an otherwise quiet machine is its CPU time.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import typer

from bench.engine_bench import encoded_batches, leaderboard_engine
from bench.machine_info import machine, machine_text
from leaderboard.dataflow import Params, build_app
from leaderboard.votegen import write_votes_file
from txstream.config import Settings
from txstream.model.app import App
from txstream.schemas.registry import SchemaRegistry

PAUSE_S = 0.0003  # about a live worker's time between records at 3,000-4,000 batches/s
C_WORK = 20_000  # ints summed; a few hundred µs here


def _spin() -> None:
    end = time.perf_counter() + PAUSE_S
    while time.perf_counter() < end:
        pass


def _c_work() -> None:
    sum(range(C_WORK))


BETWEEN: dict[str, Callable[[], None]] = {
    "none": lambda: None,
    "sleep": lambda: time.sleep(PAUSE_S),
    "python": _spin,
    "c": _c_work,
}


def parse_kinds(text: str) -> list[str]:
    """The comma-separated kinds of work between batches, each one of BETWEEN."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in BETWEEN]
    if unknown or not kinds:
        raise typer.BadParameter(
            f"unknown kind {', '.join(unknown) or '(none given)'}; choose from {', '.join(BETWEEN)}"
        )
    return kinds


class Tally:
    """Seconds and batches by kind; µs a batch for each."""

    def __init__(self, kinds: list[str]) -> None:
        self.seconds = dict.fromkeys(kinds, 0.0)
        self.batches = dict.fromkeys(kinds, 0)

    def add(self, kind: str, seconds: float) -> None:
        self.seconds[kind] += seconds
        self.batches[kind] += 1

    def us_per_batch(self) -> dict[str, float]:
        return {k: self.seconds[k] * 1e6 / n for k, n in self.batches.items() if n}


def run_once(
    app: App,
    registry: SchemaRegistry,
    kinds: list[str],
    batches: list[tuple[int, bytes]],
    group: int,
    db: Path,
    seed: int,
) -> dict[str, float]:
    pick, tally = random.Random(seed), Tally(kinds)
    with leaderboard_engine(app, registry, db) as (run, commit):
        for n, (batch_id, record) in enumerate(batches, 1):
            kind = pick.choice(kinds)
            BETWEEN[kind]()
            started = time.perf_counter()
            run(batch_id, record)
            if n % group == 0:
                commit()
            tally.add(kind, time.perf_counter() - started)
    return tally.us_per_batch()


def main(
    votes: int = typer.Option(20_000, help="votes, one per batch"),
    between: str = typer.Option("none,sleep,python,c", help="kinds of work between batches"),
    group: int = typer.Option(40, help="batches per group commit (a live worker's ~10 ms)"),
    repeat: int = typer.Option(3, help="runs, each on a fresh store; the median is reported"),
    seed: int = typer.Option(1),
) -> None:
    kinds = parse_kinds(between)
    params = Params(contestants=50, threshold=5000, max_votes=1, window=100, slide=10)
    app = build_app(params, name="interleave-bench")
    registry = SchemaRegistry(Settings().schema_dir)
    with tempfile.TemporaryDirectory(prefix="interleave-bench-") as tmp:
        path = Path(tmp) / "votes.txt"
        write_votes_file(path, votes, contestants=params.contestants, seed=seed)
        batches = encoded_batches(app, registry, path)
        runs = []
        for i in range(repeat):
            db = Path(tmp) / f"db-{i}"
            runs.append(run_once(app, registry, kinds, batches, group, db, seed + i))
            shown = ", ".join(f"{k} {us:.1f}" for k, us in runs[-1].items())
            typer.echo(f"run {i + 1}: {shown} µs a batch", err=True)
    base = statistics.median(r["none"] for r in runs) if "none" in kinds else None
    out = [
        f"Date: {date.today()}. Machine: {machine_text(machine())}. Command: `.venv/bin/python "
        f"-m bench.interleave --votes {votes} --between {between} --group {group} "
        f"--repeat {repeat}`.",
        "",
        "| before each batch | µs a batch (median) | runs | against none |",
        "|---|---:|---|---:|",
    ]
    for kind in kinds:
        each = [r[kind] for r in runs if kind in r]
        median = statistics.median(each)
        ratio = f"{median / base:.2f}x" if base else "-"
        shown = " / ".join(f"{us:.1f}" for us in each)
        out.append(f"| {kind} | {median:.1f} | {shown} | {ratio} |")
    typer.echo("\n".join(out))


if __name__ == "__main__":
    typer.run(main)
