"""Peer (d): txstream itself, through the command a user runs (`txstream leaderboard run`).

All three guarantees: each batch is one nested transaction of the three procedures, in
stream and graph order, committed exactly once with the changelog and input positions in
Kafka transactions (group commits pipelined, one in flight). The worker is a separate
supervised process. As for Quix, the votes are loaded before it starts (`--preload`), and
the rate runs from its first commit of vote batches to the commit notice of the last.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from bench.leaderboard_peers.check import Measured
from leaderboard.dataflow import Params
from txstream.config import Settings

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"(\d+) batches in ([\d.]+)s = ([\d,]+) batches/s")
GUARANTEES = "ACID nested transaction per batch; stream and graph order; exactly-once"


def run(
    settings: Settings, votes: Path, params: Params, batch_size: int, work: Path, timeout_s: float
) -> Measured:
    """Run the command in the bench's own home (`settings.home`): its worker's pidfile is
    named `worker`, and another `txstream leaderboard run` in the same checkout (a test,
    another bench) would otherwise share, and stop, it. The broker is named as external, so
    none is started."""
    result = work / "txstream.json"
    options = {
        "votes": votes,
        "result": result,
        "contestants": params.contestants,
        "threshold": params.threshold,
        "max-votes": params.max_votes,
        "window": params.window,
        "slide": params.slide,
        "batch-size": batch_size,
        "timeout-s": timeout_s,
    }
    cmd = [str(ROOT / ".venv/bin/txstream"), "leaderboard", "run", "--preload"]
    for name, value in options.items():
        cmd += [f"--{name}", str(value)]
    env = {
        **os.environ,
        "TXSTREAM_HOME": str(settings.home),
        "TXSTREAM_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
    }
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    m = SUMMARY.search(done.stdout)
    if done.returncode != 0 or m is None:
        raise RuntimeError(
            f"txstream leaderboard run failed ({done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return Measured(
        "txstream, all guarantees (changelog recovery)",
        GUARANTEES,
        int(m.group(1)),
        float(m.group(2)),
        "votes preloaded; first committed batch to the last (start-up excluded)",
        json.loads(result.read_text()),
    )
