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
        entries.update(task.store.scan(task.codec.prefix(table, ())))
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


def main(
    votes: int = typer.Option(20_000, help="how many votes to generate"),
    contestants: int = typer.Option(12, help="N: contestants numbered 1..N"),
    threshold: int = typer.Option(1000, help="T: remove the lowest every T accepted votes"),
    seed: int = typer.Option(1, help="generator seed"),
) -> None:
    settings = Settings()
    Stack(settings).up_kafka(console.print)
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
    with Live(console=console, refresh_per_second=4) as live:

        def on_commit(info: dict[str, Any]) -> None:
            nonlocal done, shown
            done = max(done, info.get("last", {}).get("votes", 0))
            now = time.monotonic()
            if now - shown > 0.5 or done >= total:
                live.update(render(committed_result(task), done, total, now - started))
                shown = now

        pump.run_until(lambda _: done >= total, timeout_s=600, on_commit=on_commit)
    elapsed = time.monotonic() - started
    pump.close()
    doc = committed_result(task)
    task.close()
    console.print(
        f"\nfinal: top3 {doc['top3']}  bottom3 {doc['bottom3']}  trending3 {doc['trending3']}"
    )
    console.print(f"{total:,} batches in {elapsed:.1f}s = {total / elapsed:,.0f} batches/s")


if __name__ == "__main__":
    typer.run(main)
