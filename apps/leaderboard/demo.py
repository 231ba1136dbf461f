"""`make demo`: the Leaderboard on the local stack, with the leaderboards shown as they change.

It generates votes with S-Store's generator semantics, loads them as atomic batches, and runs
the dataflow on a partition engine with the exactly-once commit path (Kafka transactions,
changelog, RocksDB). The engine runs in this process; the supervised worker comes later.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from txstream.commit.pipeline import CommitSummary
from txstream.config import Settings
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask
from txstream.stack.stack import Stack
from txstream.state.codec import table_rows

BOARD_TABLES = ("contestants", "stats", "removed", "trending")
console = Console()


def committed_result(task: PartitionTask) -> dict[str, Any]:
    entries: dict[bytes, bytes] = {}
    for table in BOARD_TABLES:
        entries.update(task.partition_state.store.scan(task.codec.prefix(table, ())))
    return result_document(table_rows(task.codec, entries))


def render(doc: dict[str, Any], batches: int, total: int, elapsed: float) -> Group:
    boards = Table(title=f"batch {batches:,}/{total:,}  ({batches / max(elapsed, 1e-9):,.0f}/s)")
    for column in ("top3", "bottom3", "trending3"):
        boards.add_column(column)
    rows = [doc["top3"], doc["bottom3"], doc["trending3"]]
    for i in range(3):
        boards.add_row(*(f"#{r[i][0]}: {r[i][1]}" if i < len(r) else "" for r in rows))
    removed = ", ".join(f"#{r['contestant_number']}" for r in doc["removed"]) or "none yet"
    return Group(
        boards, f"accepted {doc['accepted']:,}  rejected {doc['rejected']}", f"removed: {removed}"
    )


# Of the generated votes, those for a contestant still in the race are accepted (a few
# others repeat an id or exceed the limit): after k of n contestants are removed, about
# (n - k) / n of them. The generator favours some contestants, and the least voted for go
# first, so that share is a lower bound.
ACCEPTED_SHARE = 0.99
LAST_REMOVAL_AT = 0.9  # of the run


def spread_threshold(votes: int, contestants: int) -> int:
    """A removal threshold that spreads the removals over the whole run: the last of them
    comes near its end, and the top three are never removed."""
    # Aim one removal short of leaving three: the favoured contestants' share makes the
    # estimate low, and brings that last removal too.
    removals = max(contestants - 4, 1)
    # votes needed for `removals` thresholds' worth of accepted ones, per unit of threshold
    per_unit = sum(contestants / (contestants - k) for k in range(removals))
    return max(1, int(votes * LAST_REMOVAL_AT * ACCEPTED_SHARE / per_unit))


def main(
    votes: int = typer.Option(20_000, help="how many votes to generate"),
    contestants: int = typer.Option(12, help="N: contestants numbered 1..N"),
    threshold: int | None = typer.Option(
        None,
        help="T: remove the lowest every T accepted votes; default: removals spread over "
        "the whole run, three contestants left at the end",
    ),
    seed: int = typer.Option(1, help="generator seed"),
    plot: Path = typer.Option(
        Path(".txstream/demo-throughput.png"), help="where to draw batches/s over the run"
    ),
) -> None:
    settings = Settings()
    Stack(settings).up_kafka(console.print)
    if threshold is None:
        threshold = spread_threshold(votes, contestants)
    params = Params(contestants=contestants, threshold=threshold, window=100, slide=10)
    app = build_app(params, name=f"leaderboard-demo-{int(time.time())}")
    console.print(f"app {app.name}: {asdict(params)}")
    with tempfile.TemporaryDirectory() as tmp:
        votes_file = Path(tmp) / "votes.txt"
        write_votes_file(votes_file, votes, contestants=contestants, seed=seed)
        loader = Loader(settings, app)
        loader.load_reference_data()
        total = loader.load_votes(votes_file, batch_size=1)
    console.print(f"loaded {total:,} vote batches; running the dataflow")

    task = PartitionTask(app, 0, settings)
    pump = TaskPump(task, task.open())
    done, started, shown = 0, time.monotonic(), 0.0
    progress: list[tuple[float, int]] = []
    with Live(console=console, refresh_per_second=4) as live:

        def on_commit(info: CommitSummary) -> None:
            nonlocal done, shown
            done = max(done, info.last.get("votes", 0))
            now = time.monotonic()
            progress.append((now - started, done))
            if now - shown > 0.5 or done >= total:
                live.update(render(committed_result(task), done, total, now - started))
                shown = now

        pump.run_until(lambda _: done >= total, timeout_s=600, on_commit=on_commit)
    elapsed = time.monotonic() - started
    pump.close()
    doc = committed_result(task)
    task.close()
    final = ", ".join(f"#{n}" for n, _ in doc["top3"])
    console.print(f"\nfinal top three (the boards above are the committed end state): {final}")
    console.print(f"{total:,} batches in {elapsed:.1f}s = {total / elapsed:,.0f} batches/s")
    draw_throughput(progress, plot)
    console.print(f"throughput over the run: {plot}")


def draw_throughput(progress: list[tuple[float, int]], path: Path) -> None:
    """Committed vote batches per second over the run, in half-second steps."""
    from matplotlib.figure import Figure  # only here: the demo's one plot

    steps: dict[int, int] = {}
    last = 0
    for t, done in progress:
        steps[int(t * 2)] = steps.get(int(t * 2), 0) + done - last
        last = done
    xs = sorted(steps)
    fig = Figure(figsize=(8, 3))
    ax = fig.add_subplot()
    ax.plot([x / 2 for x in xs], [steps[x] * 2 for x in xs])
    ax.set_xlabel("seconds since the first commit")
    ax.set_ylabel("batches/s committed")
    ax.set_title("make demo: the Leaderboard, 1 vote per batch, every guarantee")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")


if __name__ == "__main__":
    typer.run(main)
