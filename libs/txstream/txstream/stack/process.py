"""Pidfile-tracked background processes.

A pid alone is not proof of identity: after a SIGKILL the pid can be reused by an unrelated
process. Each managed process therefore has a marker (a path unique to its home) that must
appear in its command line before we treat the pid as ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from txstream.pids import cmdline, is_alive


@dataclass(frozen=True)
class ManagedProcess:
    name: str
    run_dir: Path
    marker: str
    suffix: str = ".pid"  # of the pid file's name

    @property
    def pidfile(self) -> Path:
        return self.run_dir / f"{self.name}{self.suffix}"

    def recorded_pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def live_pid(self) -> int | None:
        """The recorded pid if that process is alive and is really ours.

        For a child of this process the kernel answers exactly (waitpid), even while the child
        is still starting up; any other pid must carry our marker in its command line.
        """
        pid = self.recorded_pid()
        if pid is None:
            return None
        running_child = child_running(pid)
        if running_child is not None:
            return pid if running_child else None
        if is_alive(pid) and self.marker in cmdline(pid):
            return pid
        return None

    def is_stale(self) -> bool:
        return self.pidfile.exists() and self.live_pid() is None

    def clear(self) -> None:
        self.pidfile.unlink(missing_ok=True)

    def spawn(
        self,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        pin: Callable[[], None] | None = None,
    ) -> int:
        """Start detached (own session), so the stack outlives the command that started it.
        `pin` runs in the child before it executes (`txstream.cpus.pinning`)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
                preexec_fn=pin,
            )
        self.pidfile.write_text(f"{proc.pid}\n")
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after `timeout_s`. Returns whether a process was stopped."""
        pid = self.live_pid()
        if pid is None:
            self.clear()
            return False
        os.kill(pid, signal.SIGTERM)
        if not wait_exit(pid, timeout_s):
            os.kill(pid, signal.SIGKILL)
            wait_exit(pid, 10.0)
        self.clear()
        return True


def needs_start(name: str, proc: ManagedProcess, where: str, report: Callable[[str], None]) -> bool:
    """Whether `up` must start this component: a live one is left alone, and a stale pidfile
    left by a SIGKILL is reported and cleared."""
    pid = proc.live_pid()
    if pid is not None:
        report(f"{name} already running (pid {pid}) at {where}; nothing to do")
        return False
    if proc.is_stale():
        report(f"{name}: stale pidfile (pid {proc.recorded_pid()} is gone); restarting")
        proc.clear()
    report(f"{name}: starting at {where} ...")
    return True


def child_running(pid: int) -> bool | None:
    """Whether our child `pid` still runs (reaping it if it exited); None if not our child."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    # A killed child with threads shows as a zombie before the kernel lets it be reaped (its
    # other threads are still exiting): waitpid says "not yet", but it no longer runs.
    return done == 0 and is_alive(pid)


def wait_exit(pid: int, timeout_s: float) -> bool:
    """Poll until the process is gone; reaps it when it is our child."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return not is_alive(pid)


def port_free(host: str, port: int) -> bool:
    """Whether a server could bind host:port now (checked before spawning one, so a taken
    port is reported by name rather than as a crash in the server's log)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def wait_answering(
    proc: ManagedProcess,
    pid: int,
    answers: Callable[[], bool],
    timeout_s: float,
    what: tuple[str, str, Path],
    error: type[Exception],
) -> None:
    """Until the just-spawned `pid` answers. `what` is (name, address, log): an `error`
    naming them if it exits first (with its log's last lines) or never answers."""
    name, where, log = what
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.live_pid() != pid:
            raise error(f"{name} exited during startup; see {log}:\n{log_tail(log)}")
        if answers():
            return
        time.sleep(0.2)  # poll interval between readiness probes, not a stand-in for one
    raise error(f"{name} did not answer on {where} within {timeout_s:.0f}s; see {log}")


def log_tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
