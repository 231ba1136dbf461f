"""Fault injection: SIGKILL a supervised service at seeded random moments."""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path

from txstream.pids import cmdline, is_alive


class Killer(threading.Thread):
    """SIGKILLs the process named by its pidfile, at random moments while it works.

    `marker` must be in the process's command line, so a reused pid is never killed. Each
    incarnation is killed only after it has written `ready` to `log` (its state restored,
    its input assigned), so no kill is wasted on a process still importing its modules.
    """

    def __init__(
        self, pidfile: Path, marker: str, kills: int, seed: int, log: Path, ready: str
    ) -> None:
        super().__init__(daemon=True)
        self.pidfile, self.marker = pidfile, marker
        self.kills, self.rng = kills, random.Random(seed)
        self.log, self.ready = log, ready
        self.killed: list[int] = []
        self.done = threading.Event()

    def _readies(self) -> int:
        try:
            return self.log.read_text(errors="replace").count(self.ready)
        except FileNotFoundError:
            return 0

    def _live_target(self, not_pid: int | None) -> int | None:
        try:
            pid = int(self.pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return None
        ok = pid != not_pid and is_alive(pid) and self.marker in cmdline(pid)
        return pid if ok else None

    def run(self) -> None:
        last: int | None = None
        readies = 0
        while len(self.killed) < self.kills and not self.done.is_set():
            pid = self._live_target(last)
            if pid is None or self._readies() <= readies:
                self.done.wait(0.05)  # poll for the next incarnation to be up
                continue
            if self.done.wait(self.rng.uniform(0.3, 1.2)):  # let it work a random while
                return
            if self._live_target(last) == pid:
                readies = self._readies()
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
                last = pid


def kill_leftovers(home: Path) -> None:
    """SIGKILL, by pid, every process a run under `home` left behind (its services and their
    supervisors), so a failed run cannot leak workers into the next test."""
    run_dir = home / "run"
    for pidfile in [*run_dir.glob("*.pid"), *run_dir.glob("*.supervisor")]:
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            continue
        if is_alive(pid) and str(home) in cmdline(pid):
            os.kill(pid, signal.SIGKILL)
