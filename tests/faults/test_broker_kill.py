"""The broker itself SIGKILLed mid-run and started again on the same data.

The worker's commits fail while the broker is down; the worker exits, its supervisor
restarts it, and once the broker is back the clients reconnect. Nothing may be lost or
applied twice: the result equals the serial reference, each output batch exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from leaderboard.commits import wait_for_batches
from tests.support.kafka_env import private_settings
from tests.support.scale import scaled, seeds
from tests.support.worker_run import LeaderboardWorker
from txstream.config import Settings
from txstream.model.declarations import RecoveryMode
from txstream.stack.broker import BrokerError, KafkaBroker
from txstream.stack.process import wait_exit

pytestmark = pytest.mark.kafka

VOTES = scaled(4000, 12_000)


@pytest.mark.slow  # a private broker SIGKILLed (~40 s): runs in make faults
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", seeds([31], [31, 32, 33]))
def test_sigkilled_broker_comes_back_and_nothing_is_lost_or_duplicated(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = private_settings(tmp_path / "home")
    # the supervised worker inherits the environment: point it at this private broker
    monkeypatch.setenv("TXSTREAM_KAFKA_BOOTSTRAP", settings.bootstrap_servers)
    broker = KafkaBroker(settings)
    broker.start()
    try:
        run = LeaderboardWorker(settings, tmp_path, RecoveryMode.STRONG, VOTES, seed)
        worker = run.supervised()
        worker.start()
        alive = lambda: worker.supervisor.live_pid() is not None  # noqa: E731
        try:
            run.load_votes(alive)
            at = run.rng.randrange(run.last // 4, run.last // 2)
            wait_for_batches(settings, run.commits, {"votes": at}, 180, alive)
            pid = broker.process.live_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            assert wait_exit(pid, 30), "the broker survived SIGKILL"
            restart(settings)
            wait_for_batches(settings, run.commits, {"votes": run.last}, 300, alive)
        finally:
            worker.stop()
        run.check_result()
        run.check_exactly_once()
    finally:
        broker.process.stop()


def restart(settings: Settings, timeout_s: float = 60) -> None:
    """Start the broker again once its ports are free: the dead broker's connections
    linger in FIN_WAIT a moment after SIGKILL, and hold the listener's port until they go."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            KafkaBroker(settings).start()
            return
        except BrokerError as e:
            if "in use" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
