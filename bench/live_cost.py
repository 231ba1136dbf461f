"""The worker's CPU per Leaderboard batch, by thread, live against backed up.

    .venv/bin/python -m bench.live_cost --live 4000 --busy 20000 --pairs 3

The latency target is set at half of a preloaded run's throughput, but a live batch (a
worker keeping up, committing every 10 ms) cost about twice a backed-up one
(docs/performance-history.md, 2026-11-29): this is the figure that must fall for the tail at half
load to. Each run is the latency
harness's paced level (`measure_level`: a fresh app and worker, one vote a batch) at one
offered rate; the worker's threads' CPU is read from /proc over the steady seconds of the
sending, their names from `py-spy dump` (Python does not name its threads for the OS).
Runs of the two rates alternate, minutes apart on a shared machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import typer

from bench.leaderboard_peers.latency import measure_level
from bench.leaderboard_peers.topics import delete_topics_with
from bench.machine_info import machine, machine_text
from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from txstream.config import Settings

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.25
SKIP_S = 1.5  # the worker's first second of input runs cold (the harness's warm-up)


@dataclass(frozen=True)
class Run:
    offered: float
    achieved: float
    p99_ms: float
    us_per_batch: dict[str, float]  # thread -> µs of CPU a batch

    @property
    def total(self) -> float:
        return sum(self.us_per_batch.values())


def _thread_ticks(pid: int, proc: Path = Path("/proc")) -> dict[str, tuple[str, int]]:
    """tid -> (the OS's name of the thread, its user and system ticks so far)."""
    ticks = {}
    for task in (proc / str(pid) / "task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile; the process ending stops the listing
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        utime, stime = fields.split()[11:13]
        ticks[task.name] = (name, int(utime) + int(stime))
    return ticks


def _python_names(pid: int) -> dict[str, str]:
    """tid -> the Python thread's name, as py-spy reports it; {} if it cannot attach."""
    py_spy = Path(sys.executable).with_name("py-spy")
    dump = subprocess.run(
        [str(py_spy), "dump", "--pid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return dict(re.findall(r'Thread (\d+) \([^)]*\): "([^"]+)"', dump))


class _Sampler:
    """Each thread's ticks from SKIP_S after the first send until the sending ends (the
    backlog a busy worker drains after it is not sampled)."""

    def __init__(self, seconds: float) -> None:
        self.sending_s = seconds
        self.first: dict[str, tuple[str, int]] = {}
        self.last: dict[str, tuple[str, int]] = {}
        self.names: dict[str, str] = {}
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(pid,), daemon=True)
        self._thread.start()

    def _run(self, pid: int) -> None:
        end = time.monotonic() + self.sending_s - 0.5
        if self._stop.wait(SKIP_S):
            return
        try:
            self.first, began = _thread_ticks(pid), time.monotonic()
            self.names = _python_names(pid)
            while not self._stop.wait(SAMPLE_S) and time.monotonic() < end:
                self.last, self.seconds = _thread_ticks(pid), time.monotonic() - began
        except FileNotFoundError:  # the worker stopped
            return

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def per_thread(self) -> dict[str, float]:
        """CPU seconds by thread name, digits folded (task-p0_0 -> task-pN_N), most first."""
        out: dict[str, float] = {}
        for tid, (name, ticks) in self.last.items():
            named = re.sub(r"\d+", "N", self.names.get(tid, name))
            out[named] = out.get(named, 0.0) + (ticks - self.first.get(tid, (name, 0))[1]) * TICK_S
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def measure(settings: Settings, rate: float, seconds: float, work: Path) -> Run:
    params = Params(threshold=5000)
    votes = work / f"votes-{rate:.0f}.txt"
    write_votes_file(votes, int(rate * seconds), contestants=params.contestants, seed=8)
    sampler, tags = _Sampler(seconds), list[str]()
    try:
        level = measure_level(settings, params, 1, rate, votes, 0.5, tags, sampler.start)
    finally:
        sampler.close()
        delete_topics_with(settings, tags)
    if sampler.seconds <= 0:
        raise RuntimeError(f"no CPU samples at {rate:,.0f} batches/s: the run was too short")
    batches = level.achieved_rate * sampler.seconds
    cpu = {name: s * 1e6 / batches for name, s in sampler.per_thread().items() if s > 0}
    return Run(rate, level.achieved_rate, level.p99_ms, cpu)


def main(
    live: float = typer.Option(4000, help="a rate the worker keeps up with (batches/s)"),
    busy: float = typer.Option(20000, help="a rate it cannot keep up with (batches/s)"),
    seconds: float = typer.Option(8.0, help="seconds of sending at each rate"),
    pairs: int = typer.Option(3, help="alternating runs of each rate"),
) -> None:
    settings = Settings()
    out = [
        f"Date: {date.today()}. Machine: {machine_text(machine(settings))}. Command: "
        f"`.venv/bin/python -m bench.live_cost --live {live:.0f} --busy {busy:.0f} "
        f"--seconds {seconds:g} --pairs {pairs}`.",
        "",
        "| offered batches/s | achieved | p99 | worker µs a batch | by thread (µs a batch) |",
        "|---:|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="live-cost-") as tmp:
        for _ in range(pairs):
            for rate in (live, busy):
                run = measure(settings, rate, seconds, Path(tmp))
                threads = ", ".join(f"{k} {v:.0f}" for k, v in run.us_per_batch.items() if v >= 1)
                typer.echo(f"{rate:,.0f}/s: {run.total:.0f} µs a batch ({threads})", err=True)
                out.append(f"| {run.offered:,.0f} | {run.achieved:,.0f} | {run.p99_ms:,.0f} ms "
                           f"| {run.total:.0f} | {threads} |")  # fmt: skip
    typer.echo("\n".join(out))


if __name__ == "__main__":
    typer.run(main)
