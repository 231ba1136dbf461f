"""Seeded faults on a private multi-broker cluster, shared by the cluster fault tests.

One fault at a time, each waited out before the next, so a failure names the fault that
broke the run. A test subclasses `Chaos` with its own component's faults (methods named
after the fault, dashes as underscores) and says how many of each to plan.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable

from txstream.config import Settings
from txstream.stack.broker import BrokerError, KafkaBroker
from txstream.stack.process import wait_exit


class Chaos:
    """The broker faults; a subclass adds its components' and says how many of each."""

    def __init__(self, settings: Settings, seed: int, counts: dict[str, int]) -> None:
        self.settings, self.counts = settings, counts
        self.rng = random.Random(seed)
        self.done: list[str] = []

    def plan(self) -> list[str]:
        """The faults, shuffled by the seeded generator."""
        planned = [f for f, n in self.counts.items() for _ in range(n)]
        self.rng.shuffle(planned)
        return planned

    def run(self, stop: threading.Event) -> None:
        for fault in self.plan():
            if stop.wait(self.rng.uniform(0.5, 2.0)):
                return
            getattr(self, fault.replace("-", "_"))()
            self.done.append(fault)
            self.after(fault)

    def after(self, fault: str) -> None:
        """What to wait for once a fault is over, before the next: by default nothing."""

    def broker_kill(self) -> None:
        node = self._broker()
        pid = node.process.live_pid()
        assert pid is not None, f"{node.name} is not running"
        os.kill(pid, signal.SIGKILL)
        assert wait_exit(pid, 30), f"{node.name} survived SIGKILL"
        restart(node)

    def broker_stop(self) -> None:
        node = self._broker()
        pid = node.process.live_pid()
        assert pid is not None, f"{node.name} is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(self.rng.uniform(2.0, 6.0))  # the fault's length, not a wait for a state
        finally:
            os.kill(pid, signal.SIGCONT)

    def _broker(self) -> KafkaBroker:
        return KafkaBroker(self.settings, self.rng.randint(1, self.settings.kafka_brokers))

    @staticmethod
    def wait(condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s waiting for {what}"
            time.sleep(0.1)


def sigkill(pid: int | None, what: str) -> int:
    """SIGKILL `pid` and wait for it to be gone."""
    assert pid is not None, f"{what} is not running"
    os.kill(pid, signal.SIGKILL)
    assert wait_exit(pid, 30), f"{what} survived SIGKILL"
    return pid


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
