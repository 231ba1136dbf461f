"""The Leaderboard on a three-broker cluster while brokers and the worker are killed.

Brokers are SIGKILLed (and started again on their data) or SIGSTOPped for a few seconds;
the supervised worker is SIGKILLed, sometimes again while its successor is still starting
up and restoring. Votes arrive paced from a client throughout, so every fault lands while
there is work. The result must equal the serial reference, each batch exactly once.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from leaderboard.commits import wait_for_batches
from leaderboard.votes_file import validate_votes_file
from tests.support.chaos import Chaos, sigkill
from tests.support.kafka_env import cluster_settings
from tests.support.scale import scaled, seeds
from tests.support.worker_run import LeaderboardWorker
from txstream.config import Settings
from txstream.model.declarations import RecoveryMode
from txstream.stack.cluster import KafkaCluster
from txstream.stack.supervisor import Supervised

pytestmark = pytest.mark.kafka

KILLS = scaled(2, 5)  # of each kind: broker SIGKILL, broker SIGSTOP, worker SIGKILL
VOTES = scaled(6_000, 20_000)
RATE = scaled(300, 400)  # votes/s from the paced client: the faults fit inside the input


class WorkerChaos(Chaos):
    """The broker faults and the worker's: SIGKILLed, once again while it starts up."""

    def __init__(self, settings: Settings, worker: Supervised, log: Path, seed: int) -> None:
        counts = {"broker-kill": KILLS, "broker-stop": KILLS, "worker-kill": KILLS - 1,
                  "worker-kill-at-start": 1}  # fmt: skip
        super().__init__(settings, seed, counts)
        self.worker, self.log = worker, log

    def worker_kill(self) -> None:
        recovered = self.recoveries()
        sigkill(self.worker.child.live_pid(), "the worker")
        self.wait(lambda: self.recoveries() > recovered, "the worker to recover")

    def worker_kill_at_start(self) -> None:
        """Kill the worker, then its successor as soon as it runs: during start-up/restore."""
        recovered = self.recoveries()
        first = sigkill(self.worker.child.live_pid(), "the worker")
        self.wait(lambda: self.worker.child.live_pid() not in (None, first), "a restart")
        sigkill(self.worker.child.live_pid(), "the worker")
        self.wait(lambda: self.recoveries() > recovered, "the worker to recover")

    def recoveries(self) -> int:
        return self.log.read_text(errors="replace").count("recovered p0:")


@pytest.mark.slow  # three brokers and ~10 faults: runs in make faults
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
            chaos = WorkerChaos(settings, worker, run.log, seed)
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
