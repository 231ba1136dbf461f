"""The supervisor against real processes: SIGKILLed children come back, stops leave nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from txstream.config import Settings
from txstream.pids import cmdline, is_alive
from txstream.stack.process import wait_exit
from txstream.stack.supervisor import Policy, Supervised

TIMEOUT_S = 20.0
TXSTREAM = str(Path(sys.executable).with_name("txstream"))

# A service that runs until a signal ends it ("stubborn": SIGTERM does not). Its journal line
# (pid, and what the pidfile said at its start) means it is up.
CHILD = """\
import os, signal, sys
from pathlib import Path

pidfile, journal, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
seen = pidfile.read_text().strip() if pidfile.exists() else "missing"
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with journal.open("a") as f:
    f.write(f"{os.getpid()} {seen}\\n")
while True:
    signal.pause()
"""

# Reads the pidfile within a millisecond of exec, so a pidfile written only after the child
# starts is caught in the act; then exits with the given status.
SHELL_CHILD = 'read -r seen < "$0" || seen=missing; echo "$$ $seen" >> "$1"; exit {status}'


class Service:
    """One test service in a private home: its script, journal and command line."""

    def __init__(self, tmp_path: Path, name: str = "svc") -> None:
        self.settings = Settings(home=tmp_path / "home")
        self.name = name
        self.script = tmp_path / "child.py"
        self.script.write_text(CHILD)
        self.journal = tmp_path / "journal"
        self.pidfile = self.settings.run_dir / f"{name}.pid"

    def argv(self, *mode: str) -> list[str]:
        return [sys.executable, str(self.script), str(self.pidfile), str(self.journal), *mode]

    def shell_argv(self, status: int) -> list[str]:
        code = SHELL_CHILD.format(status=status)
        return ["sh", "-c", code, str(self.pidfile), str(self.journal)]

    def entries(self, count: int) -> list[tuple[int, str]]:
        """The journal once it has `count` lines: (child pid, pidfile content at its start)."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            lines = self.journal.read_text().splitlines() if self.journal.exists() else []
            if len(lines) >= count:
                return [(int(pid), seen) for pid, seen in (ln.split() for ln in lines)]
            time.sleep(0.02)
        raise AssertionError(f"journal has fewer than {count} lines")

    def cli(self, *options: str, child: list[str]) -> list[str]:
        identity = ["--home", str(self.settings.home), "--name", self.name]
        return [TXSTREAM, "supervise", *identity, *options, "--", *child]

    def supervisor_log(self) -> str:
        return (self.settings.log_dir / f"{self.name}.supervisor.log").read_text()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(tmp_path)
    yield svc
    # Leave nothing running even when a test fails: every child signed the journal.
    Supervised(svc.name, svc.argv(), svc.settings).stop(timeout_s=5)
    pids = [pid for pid, _ in svc.entries(0)]
    for pid in pids:
        if is_alive(pid) and str(svc.script) in cmdline(pid):
            os.kill(pid, signal.SIGKILL)


def supervised(service: Service, *mode: str, stop_timeout_s: float = 5.0) -> Supervised:
    fast = Policy(backoff_ms=20, stop_timeout_s=stop_timeout_s)
    return Supervised(service.name, service.argv(*mode), service.settings, policy=fast)


def test_sigkilled_child_is_restarted_under_a_rewritten_pidfile(service: Service) -> None:
    sv = supervised(service, "run")
    supervisor = sv.start()
    pids = [sv.wait_child(TIMEOUT_S)]
    for n in range(1, 4):
        service.entries(n)  # the child has started its own work
        os.kill(pids[-1], signal.SIGKILL)
        pid = sv.wait_child(TIMEOUT_S, replacing=pids[-1])
        assert pid not in pids
        assert int(service.pidfile.read_text()) == pid
        assert is_alive(pid) and str(service.script) in cmdline(pid)
        assert sv.restarts() == n
        pids.append(pid)

    # Each child found its own pid in the pidfile before it ran a line of its own.
    assert service.entries(4) == [(pid, str(pid)) for pid in pids]
    assert service.supervisor_log().count("killed by SIGKILL; restart") == 3

    assert sv.stop()
    assert wait_exit(supervisor, 0)
    assert not any(is_alive(pid) for pid in pids)
    assert list(service.settings.run_dir.iterdir()) == []
    assert "sending SIGTERM to child" in service.supervisor_log()


def test_child_exiting_zero_ends_the_supervisor_cleanly(service: Service) -> None:
    cli = service.cli(child=service.shell_argv(0))
    done = subprocess.run(cli, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    [(pid, seen)] = service.entries(1)
    assert seen == str(pid)
    assert list(service.settings.run_dir.iterdir()) == []
    assert "exited with status 0" in service.supervisor_log()


def test_crash_loop_exceeds_max_restarts_and_fails(service: Service) -> None:
    options = ("--max-restarts", "5", "--backoff-ms", "1", "--backoff-max-ms", "1")
    cli = service.cli(*options, child=service.shell_argv(3))
    done = subprocess.run(cli, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 1
    assert "giving up" in done.stderr and "--max-restarts=5" in done.stderr
    entries = service.entries(6)
    assert entries == [(pid, str(pid)) for pid, _ in entries], "pidfile lagged behind a child"
    assert len(entries) == 6
    assert service.supervisor_log().count("exited with status 3; restart") == 5
    assert list(service.settings.run_dir.iterdir()) == []


def test_sigint_stops_child_and_supervisor(service: Service) -> None:
    proc = subprocess.Popen(
        service.cli(child=service.argv("run")), stderr=subprocess.PIPE, text=True
    )
    try:
        [(child, _)] = service.entries(1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "received SIGINT; sending SIGTERM" in err
    assert not is_alive(child)
    assert list(service.settings.run_dir.iterdir()) == []


def test_child_ignoring_sigterm_is_sigkilled_after_the_grace(service: Service) -> None:
    sv = supervised(service, "stubborn", stop_timeout_s=0.3)
    sv.start()
    [(child, _)] = service.entries(1)  # signed only once SIGTERM is ignored
    assert sv.stop()
    assert not is_alive(child)
    assert "still running after 0.3 s; sending SIGKILL" in service.supervisor_log()


def test_sigkilled_supervisor_takes_its_child_down(service: Service) -> None:
    sv = supervised(service, "run")
    supervisor = sv.start()
    child = sv.wait_child(TIMEOUT_S)
    os.kill(supervisor, signal.SIGKILL)
    assert wait_exit(supervisor, TIMEOUT_S)
    assert wait_exit(child, TIMEOUT_S), "PR_SET_PDEATHSIG should have sent SIGTERM"
    assert sv.child_pid() is None
    assert not sv.stop()
    assert list(service.settings.run_dir.iterdir()) == []
