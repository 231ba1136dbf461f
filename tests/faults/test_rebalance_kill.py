"""Workers SIGKILLed during consumer-group rebalances, while the bank's 2PC transfers run.

Two workers share four partitions. Each round a third worker joins (the group rebalances:
partitions move to it) and an old worker is SIGKILLed while the group is not stable; then
the newcomer is SIGKILLed just after it got its partitions, while it restores them; then
it is stopped for good, and when the group drops it (after the session timeout) and
rebalances again, an old worker is SIGKILLed once more. The end state must be the opening
balances plus exactly the transfers the client was told committed, the total unchanged.
In `make faults` only: each round waits out a session timeout.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from bank.run import BankConfig, BankReport, BankRun
from tests.support.bank_checks import check_end_state
from tests.support.kafka_env import KafkaEnv
from tests.support.scale import seeds
from tests.support.sequencer_driver import unique
from txstream.config import Settings
from txstream.kafka.clients import common_config
from txstream.stack.supervisor import Policy, Supervised

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,  # three rebalances, each a session timeout: make faults
]

# Enough transfers that the run outlasts the rounds (each waits out a session timeout).
ACCOUNTS, TRANSFERS, ROUNDS = 1000, 30_000, 3
STABLE = ConsumerGroupState.STABLE


class Group:
    """The workers' consumer group, as the broker describes it."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.admin = AdminClient(common_config(settings))
        self.id = f"txstream-{name}"

    def state(self) -> tuple[ConsumerGroupState, int]:
        desc = self.admin.describe_consumer_groups([self.id])[self.id].result(30)
        return desc.state, len(desc.members)

    def wait(
        self, what: str, check: Callable[[ConsumerGroupState, int], bool], timeout_s: float = 90.0
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check(*self.state()):
                return
            time.sleep(0.05)  # polling the broker's view of the group
        raise AssertionError(f"group {self.id}: {what} not within {timeout_s:.0f}s")


def sigkill(service: Supervised) -> int:
    """SIGKILL the service's child, once there is one (its supervisor may be restarting it)."""
    pid = service.wait_child(60)
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.parametrize("seed", seeds([5], [5, 6, 7]))
def test_bank_conserves_money_with_workers_killed_during_rebalances(
    kafka: KafkaEnv, tmp_path: Path, seed: int
) -> None:
    settings = Settings(home=tmp_path / "home", kafka_bootstrap=kafka.bootstrap)
    name = unique("rebalance").replace("-", "_")
    config = BankConfig(ACCOUNTS, TRANSFERS, partitions=4, workers=2, seed=seed, name=name)
    run = BankRun(config, settings)
    workers = run.services()[1:]  # the same supervised names the run starts
    done = [0]
    reports: list[BankReport] = []
    runner = threading.Thread(
        target=lambda: reports.append(run.run(lambda n, _: done.__setitem__(0, n))), daemon=True
    )
    joiner = Supervised(
        f"{name}-worker-2",
        [str(Path(sys.executable).with_name("txstream")), "worker", "run", "--app",
         "bank.dataflow:from_params", "--params", f'{{"name": "{name}"}}', "--instance-id", "2"],
        settings,
        policy=Policy(max_restarts=100, window_s=60.0, backoff_ms=100, backoff_max_ms=1000),
    )  # fmt: skip
    group, rng = Group(settings, name), random.Random(seed)
    killed: list[str] = []
    runner.start()
    try:
        for r in range(ROUNDS):
            while done[0] < TRANSFERS * (r + 1) // 10 and runner.is_alive():
                time.sleep(0.05)  # waiting for the run's progress
            assert runner.is_alive(), f"the bank run ended before round {r + 1}: add transfers"
            joiner.start()
            group.wait("a rebalance for the newcomer", lambda s, n: s != STABLE or n == 3)
            if group.state()[0] != STABLE:
                sigkill(workers[rng.randrange(2)])
                killed.append("old worker during the join's rebalance")
            group.wait("three members, stable", lambda s, n: s == STABLE and n == 3)
            joiner.wait_child(30)
            dead = sigkill(joiner)  # it has just been given its partitions: restoring them
            killed.append("newcomer while it restores")
            # A static member stays in the group while its process is gone: wait for its
            # supervisor to start the next incarnation, which takes the same slot.
            joiner.wait_child(60, replacing=dead)
            group.wait("three members, stable again", lambda s, n: s == STABLE and n == 3)
            joiner.stop()
            group.wait("the leaver's rebalance", lambda s, n: s != STABLE or n == 2)
            if group.state()[0] != STABLE:
                sigkill(workers[rng.randrange(2)])
                killed.append("old worker during the leave's rebalance")
            group.wait("two members, stable", lambda s, n: s == STABLE and n == 2)
        runner.join(600)
    finally:
        joiner.stop()
    assert not runner.is_alive() and reports, "the bank run did not finish"
    report = reports[0]
    during = sum("rebalance" in k for k in killed)
    assert during >= ROUNDS, f"only {during} kills landed inside a rebalance: {killed}"
    assert not report.violations(), report.violations()
    assert report.unknown == 0, "every transfer got an outcome"
    committed = sum(n for k, n in report.outcomes.items() if "committed" in k)
    assert committed > TRANSFERS // 2, report.outcomes
    check_end_state(config, settings, run)
