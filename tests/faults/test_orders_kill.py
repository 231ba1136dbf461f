"""`txstream orders run` with its workers SIGKILLed at seeded random moments: spanning
batches across engines must still give the serial reference, each outcome exactly once
(`orders.results` refuses a second committed outcome for an event, or a missing one), on
1, 2 and 4 workers, six kills or more a run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orders.files import Shop
from orders.gen import generate
from orders.reference import run as reference
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import Killer, kill_leftovers
from tests.support.scale import seeds
from txstream.config import project_root

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")
KILLS = 6  # a run, shared by its workers
EVENTS = 8_000
RUNS = [(2, seed) for seed in seeds([31], [31, 32, 33])] + [(1, 41), (4, 51)]


@pytest.mark.slow  # workers killed six times a run: runs in make faults
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("workers", "seed"), RUNS)
def test_sigkilled_workers_give_the_serial_reference(
    kafka: KafkaEnv, tmp_path: Path, workers: int, seed: int
) -> None:
    per_worker = -(-KILLS // workers)
    generate(items=40, customers=80, events=EVENTS, seed=seed, out=tmp_path)
    home = tmp_path / "home"
    env = {**os.environ, "TXSTREAM_HOME": str(home), "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap}
    killers = [
        Killer(
            home / "run" / f"worker-{i}.pid",
            "worker run",
            kills=per_worker,
            seed=seed + i,
            log=home / "log" / f"worker-{i}.log",
            ready="resuming",
        )
        for i in range(workers)
    ]
    for k in killers:
        k.start()
    try:
        run = subprocess.run(
            [TXSTREAM, "orders", "run", "--items", str(tmp_path / "items.txt"),
             "--customers", str(tmp_path / "customers.txt"),
             "--events", str(tmp_path / "events.txt"), "--result", str(tmp_path / "r.json"),
             "--partitions", "4", "--workers", str(workers), "--batch-size", "4",
             "--timeout-s", "700"],
            env=env, capture_output=True, text=True, timeout=800, check=False,
        )  # fmt: skip
    finally:
        for k in killers:
            k.done.set()
            k.join()
        kill_leftovers(home)
    assert run.returncode == 0, run.stdout + run.stderr
    killed = sum(len(k.killed) for k in killers)
    assert killed >= workers * per_worker - 1, f"only {killed} kills: {run.stdout}"
    assert f"worker restarts: {killed})" in run.stdout
    shop = Shop.read(tmp_path / "items.txt", tmp_path / "customers.txt", tmp_path / "events.txt")
    want = reference(shop).to_json()
    got = json.loads((tmp_path / "r.json").read_text())
    assert {k: got[k] for k in want} == want
