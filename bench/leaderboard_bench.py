"""Leaderboard throughput: `txstream leaderboard run`, 1 vote per batch, all guarantees on.

    .venv/bin/python bench/leaderboard_bench.py --votes 50000            # end to end, real stack
    .venv/bin/python bench/leaderboard_bench.py --votes 20000 --profile  # in-process, cProfile

Prints a markdown row for docs/performance-history.md (date, machine, command, figures).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader
from leaderboard.votegen import write_votes_file
from txstream.commit.pipeline import CommitSummary
from txstream.config import Settings
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask

ROOT = Path(__file__).resolve().parents[1]


def machine() -> str:
    return f"{platform.node()}, {os.cpu_count()} cores, {platform.python_version()}"


def end_to_end(votes: Path, count: int) -> None:
    result = votes.with_suffix(".json")
    cmd = [str(ROOT / ".venv/bin/txstream"), "leaderboard", "run", "--votes", str(votes),
           "--result", str(result)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"(\d+) batches in ([\d.]+)s = ([\d,]+) batches/s", out)
    if m is None:
        sys.exit(f"no summary line in the output:\n{out}")
    rate = float(m.group(3).replace(",", ""))
    print(out.strip())
    print(f"| {date.today()} | {machine()} | `txstream leaderboard run`, {count:,} votes, "
          f"N=50 T=20000 W=100 S=10 K=1 | {rate:,.0f} batches/s |")  # fmt: skip


def profiled(votes: Path, count: int) -> None:
    settings = Settings()
    app = build_app(Params(), name=f"leaderboard-bench-{int(time.time())}")
    loader = Loader(settings, app)
    loader.load_reference_data()
    total = loader.load_votes(votes, batch_size=1)
    task = PartitionTask(app, 0, settings)
    pump = TaskPump(task, task.open())
    done = 0

    def on_commit(info: CommitSummary) -> None:
        nonlocal done
        done = max(done, info.last.get("votes", 0))

    profiler = cProfile.Profile()
    started = time.monotonic()
    profiler.enable()
    pump.run_until(lambda _: done >= total, timeout_s=600, on_commit=on_commit)
    profiler.disable()
    elapsed = time.monotonic() - started
    pump.close()
    task.close()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(20)
    print(stream.getvalue())
    print(f"in-process under cProfile: {total:,} batches in {elapsed:.1f}s "
          f"= {total / elapsed:,.0f} batches/s (profiling overhead included)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--votes", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        votes = Path(tmp) / "votes.txt"
        write_votes_file(votes, args.votes, contestants=50, seed=args.seed)
        (profiled if args.profile else end_to_end)(votes, args.votes)


if __name__ == "__main__":
    main()
