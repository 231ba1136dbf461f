"""The Leaderboard on a three-broker cluster while brokers and the worker are killed.

Brokers are SIGKILLed (and started again on their data) or SIGSTOPped for a few seconds;
the supervised worker is SIGKILLed, sometimes again while its successor is still starting
up and restoring. Votes arrive paced from a client throughout, so every fault lands while
there is work. The result must equal the serial reference, each batch exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from leaderboard.commits import wait_for_batches
from leaderboard.votes_file import validate_votes_file
from tests.conftest import cluster_settings
from tests.faults.scale import LONG, scaled, seeds
from tests.faults.worker_run import LeaderboardWorker
from txstream.config import Settings
from txstream.model.declarations import RecoveryMode
from txstream.stack.broker import BrokerError, KafkaBroker
from txstream.stack.cluster import KafkaCluster
from txstream.stack.process import wait_exit
from txstream.stack.supervisor import Supervised

KILLS = scaled(2, 5)  # of each kind: broker SIGKILL, broker SIGSTOP, worker SIGKILL
VOTES = scaled(6_000, 20_000)
RATE = scaled(300, 400)  # votes/s from the paced client: the faults fit inside the input


class Chaos:
    """The seeded faults, one at a time, each waited out before the next."""

    def __init__(self, settings: Settings, worker: Supervised, log: Path, seed: int) -> None:
        self.settings, self.worker, self.log = settings, worker, log
        self.rng = random.Random(seed)
        self.done: list[str] = []

    def plan(self) -> list[str]:
        faults = ["broker-kill", "broker-stop", "worker-kill", "worker-kill-at-start"]
        counts = {"broker-kill": KILLS, "broker-stop": KILLS, "worker-kill": KILLS - 1,
                  "worker-kill-at-start": 1}  # fmt: skip
        planned = [f for f in faults for _ in range(counts[f])]
        self.rng.shuffle(planned)
        return planned

    def run(self, stop: threading.Event) -> None:
        for fault in self.plan():
            if stop.wait(self.rng.uniform(0.5, 2.0)):
                return
            getattr(self, fault.replace("-", "_"))()
            self.done.append(fault)

    def broker_kill(self) -> None:
        node = KafkaBroker(self.settings, self.rng.randint(1, self.settings.kafka_brokers))
        pid = node.process.live_pid()
        assert pid is not None, f"{node.name} is not running"
        os.kill(pid, signal.SIGKILL)
        assert wait_exit(pid, 30), f"{node.name} survived SIGKILL"
        restart(node)

    def broker_stop(self) -> None:
        node = KafkaBroker(self.settings, self.rng.randint(1, self.settings.kafka_brokers))
        pid = node.process.live_pid()
        assert pid is not None, f"{node.name} is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(self.rng.uniform(2.0, 6.0))  # the fault's length, not a wait for a state
        finally:
            os.kill(pid, signal.SIGCONT)

    def worker_kill(self) -> None:
        recovered = self.recoveries()
        self._kill_worker()
        self._wait(lambda: self.recoveries() > recovered, "the worker to recover")

    def worker_kill_at_start(self) -> None:
        """Kill the worker, then its successor as soon as it runs: during start-up/restore."""
        recovered = self.recoveries()
        first = self._kill_worker()
        self._wait(lambda: self.worker.child.live_pid() not in (None, first), "a restart")
        self._kill_worker()
        self._wait(lambda: self.recoveries() > recovered, "the worker to recover")

    def _kill_worker(self) -> int:
        pid = self.worker.child.live_pid()
        assert pid is not None, "the worker is not running"
        os.kill(pid, signal.SIGKILL)
        assert wait_exit(pid, 30)
        return pid

    def recoveries(self) -> int:
        return self.log.read_text(errors="replace").count("recovered p0:")

    def _wait(self, condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)


def restart(node: KafkaBroker, timeout_s: float = 60) -> None:
    """Start the node again once its ports are free (a SIGKILLed broker's connections
    linger a moment and hold its listener's port)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            node.start()
            return
        except BrokerError as e:
            if "in use" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.skipif(not LONG, reason="three brokers and ~10 faults: runs in make faults")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds([41], [41, 42, 43]))
def test_brokers_and_worker_killed_on_a_three_broker_cluster(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = cluster_settings(tmp_path / "home")
    # the supervised worker inherits the environment: point it at this private cluster
    monkeypatch.setenv("TXSTREAM_KAFKA_BOOTSTRAP", settings.bootstrap_servers)
    cluster = KafkaCluster(settings)
    cluster.start(lambda _: None)
    try:
        run = LeaderboardWorker(settings, tmp_path, RecoveryMode.CHANGELOG, VOTES, seed)
        worker = run.supervised()
        worker.start()
        alive = lambda: worker.supervisor.live_pid() is not None  # noqa: E731
        stop = threading.Event()
        try:
            run.wait_for_reference(alive)
            run.last = validate_votes_file(run.votes)
            loading = PacedLoad(run, RATE)
            loading.start()
            chaos = Chaos(settings, worker, run.log, seed)
            chaos.run(stop)
            loading.join()
            wait_for_batches(settings, run.commits, {"votes": run.last}, 300, alive)
            restarts = worker.restarts()
        finally:
            stop.set()
            worker.stop()
        assert len(chaos.done) == len(chaos.plan()), chaos.done
        assert restarts == KILLS + 1, f"{restarts} worker restarts for {chaos.done}"
        run.check_result()
        run.check_exactly_once()
    finally:
        cluster.stop(lambda _: None)


class PacedLoad(threading.Thread):
    """The votes at about `rate` batches/s from a client thread, committed every 100; a
    load error is raised again by `join`, in the test's thread."""

    def __init__(self, run: LeaderboardWorker, rate: float) -> None:
        super().__init__(name="paced-votes", daemon=True)
        self.run_, self.rate = run, rate
        self.error: BaseException | None = None

    def run(self) -> None:
        began = time.monotonic()

        def pace(last: int) -> None:  # rate-limits the input; waits for no condition
            time.sleep(max(0.0, began + last / self.rate - time.monotonic()))

        try:
            self.run_.loader.load_votes(self.run_.votes, 1, progress=pace, commit_every=100)
        except BaseException as e:
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error
