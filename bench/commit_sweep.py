"""Group commit interval x batch size: throughput against p99 latency at half load.

    .venv/bin/python -m bench.commit_sweep                       # 1/5/10/20/50 ms x K 1/10/100
    .venv/bin/python -m bench.commit_sweep --intervals 5,10 --sizes 1

For each commit interval (the worker's `TXSTREAM_COMMIT_INTERVAL_MS`) and batch size K (votes
per atomic batch) it measures, on the shared broker:
  1. throughput: `txstream leaderboard run --preload`, timed from the first committed batch to
     the last (as `bench.leaderboard_peers` times every system), result checked against the
     reference;
  2. latency at 50% of that throughput: a fresh worker fed at a paced rate, send to the commit
     notice that covers the batch (`bench.leaderboard_peers.latency`).
Writes docs/figures/commit_sweep.{json,png} (or --figures) and prints the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from matplotlib.figure import Figure
from rich.console import Console

from bench.leaderboard_peers import latency, txstream_peer
from bench.leaderboard_peers.check import differences
from bench.leaderboard_peers.topics import delete_topics_with
from bench.machine_info import machine, machine_text
from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from tests.support.reference.leaderboard_ref import run_reference
from txstream.config import Settings

ROOT = Path(__file__).resolve().parents[1]
console = Console(stderr=True)


@dataclass(frozen=True)
class Point:
    interval_ms: int
    batch_size: int
    batches_per_s: float
    correct: bool
    offered_per_s: float
    p50_ms: float
    p99_ms: float


@contextmanager
def interval(ms: int) -> Iterator[None]:
    """Workers started meanwhile (they inherit the environment) commit every `ms`."""
    before = os.environ.get("TXSTREAM_COMMIT_INTERVAL_MS")
    os.environ["TXSTREAM_COMMIT_INTERVAL_MS"] = str(ms)
    try:
        yield
    finally:
        if before is None:
            del os.environ["TXSTREAM_COMMIT_INTERVAL_MS"]
        else:
            os.environ["TXSTREAM_COMMIT_INTERVAL_MS"] = before


def measure(
    settings: Settings, params: Params, ms: int, k: int, batches: int, seconds: float, work: Path
) -> Point:
    votes = work / f"votes-k{k}.txt"
    if not votes.exists():
        write_votes_file(votes, batches * k, contestants=params.contestants, seed=1)
    reference = run_reference(
        votes,
        params.contestants,
        params.threshold,
        params.max_votes,
        params.window,
        params.slide,
        k,
    )
    tags: list[str] = []
    try:
        with interval(ms):
            got = txstream_peer.run(settings, votes, params, k, work, timeout_s=900)
            tags.append(str(got.doc["app"]) if got.doc else "")
            correct = got.doc is not None and not differences(got.doc, reference)
            paced = work / f"paced-k{k}.txt"
            rate = got.rate / 2
            write_votes_file(
                paced, max(100, int(rate * seconds)) * k, contestants=params.contestants, seed=2
            )
            level = latency.measure_level(settings, params, k, rate, paced, 0.5, tags)
    finally:
        delete_topics_with(settings, [t for t in tags if t])
    point = Point(ms, k, got.rate, correct, level.achieved_rate, level.p50_ms, level.p99_ms)
    console.print(
        f"interval {ms} ms, K={k}: {point.batches_per_s:,.0f} batches/s "
        f"({'correct' if correct else 'INCORRECT'}); at {rate:,.0f}/s p50 "
        f"{point.p50_ms:.0f} ms, p99 {point.p99_ms:.0f} ms"
    )
    return point


def markdown(points: Sequence[Point], meta: dict[str, str]) -> str:
    out = [
        f"Date: {meta['date']}. Machine: {meta['machine']}. Command: `{meta['command']}`.",
        "",
        "| commit interval | K | batches/s | votes/s | result | offered at 50% | p50 | p99 |",
        "|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for p in points:
        out.append(
            f"| {p.interval_ms} ms | {p.batch_size} | {p.batches_per_s:,.0f} "
            f"| {p.batches_per_s * p.batch_size:,.0f} | {'correct' if p.correct else 'WRONG'} "
            f"| {p.offered_per_s:,.0f} | {p.p50_ms:,.0f} ms | {p.p99_ms:,.0f} ms |"
        )
    return "\n".join(out)


def plot(points: Sequence[Point], meta: dict[str, str], path: Path) -> None:
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.subplots()
    for k in sorted({p.batch_size for p in points}):
        mine = sorted((p for p in points if p.batch_size == k), key=lambda p: p.interval_ms)
        ax.plot(
            [p.p99_ms for p in mine],
            [p.batches_per_s * k for p in mine],
            marker="o",
            label=f"K = {k} votes per batch",
        )
        for p in mine:
            ax.annotate(
                f"{p.interval_ms} ms",
                (p.p99_ms, p.batches_per_s * k),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize="small",
            )
    ax.set_xscale("log")
    ax.set_xlabel("p99 send-to-committed latency at 50% of max load (ms, log)")
    ax.set_ylabel("max throughput (votes/s)")
    ax.set_title(f"txstream group commit interval sweep, {meta['date']}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=150)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commit_sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--intervals", type=ints, default=[1, 5, 10, 20, 50], help="ms")
    parser.add_argument("--sizes", type=ints, default=[1, 10, 100], help="votes per batch")
    parser.add_argument("--batches", type=int, default=20_000, help="per throughput run")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--threshold", type=int, default=5000)
    parser.add_argument("--figures", type=Path, default=ROOT / "docs/figures")
    args = parser.parse_args()
    params = Params(contestants=50, threshold=args.threshold, window=100, slide=10)
    meta = {
        "date": str(date.today()),
        "machine": machine_text(machine()),
        "command": " ".join(
            [".venv/bin/python -m bench.commit_sweep", *map(shlex.quote, sys.argv[1:])]
        ),
    }
    points = []
    with tempfile.TemporaryDirectory(prefix="txstream-sweep-") as tmp:
        work = Path(tmp)
        settings = Settings(home=work / "home", kafka_bootstrap=Settings().bootstrap_servers)
        for k in args.sizes:
            batches = max(2_000, args.batches // k)  # K = 100 still loads 200,000 votes
            for ms in args.intervals:
                points.append(measure(settings, params, ms, k, batches, args.latency_seconds, work))
    args.figures.mkdir(parents=True, exist_ok=True)
    doc = {**meta, "points": [vars(p) for p in points]}
    (args.figures / "commit_sweep.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(points, meta, args.figures / "commit_sweep.png")
    print(markdown(points, meta))
    if not all(p.correct for p in points):
        sys.exit(1)


if __name__ == "__main__":
    main()
