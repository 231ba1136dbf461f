"""Pidfile tracking: a pid counts as ours only while alive and carrying our marker."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from txstream.pids import is_alive
from txstream.stack.process import ManagedProcess, wait_exit


def sleeper(tmp_path: Path, marker: str) -> ManagedProcess:
    return ManagedProcess("sleeper", tmp_path / "run", marker=marker)


def test_spawn_track_and_stop(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker-a")
    proc = sleeper(tmp_path, marker)
    pid = proc.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], tmp_path / "log" / "s.log"
    )
    assert proc.live_pid() == pid
    assert proc.stop(timeout_s=5)
    assert not is_alive(pid)
    assert not proc.pidfile.exists()


def test_sigkilled_process_leaves_a_stale_pidfile(tmp_path: Path) -> None:
    marker = str(tmp_path / "marker-b")
    proc = sleeper(tmp_path, marker)
    pid = proc.spawn(
        [sys.executable, "-c", "import time; time.sleep(60)", marker], tmp_path / "log" / "s.log"
    )
    os.kill(pid, signal.SIGKILL)
    assert wait_exit(pid, 5)
    assert proc.live_pid() is None
    assert proc.is_stale()


def test_reused_pid_without_marker_is_not_ours(tmp_path: Path) -> None:
    proc = sleeper(tmp_path, marker=str(tmp_path / "marker-c"))
    proc.run_dir.mkdir(parents=True)
    proc.pidfile.write_text(f"{os.getpid()}\n")  # alive, but not a process we started
    assert proc.live_pid() is None
    assert proc.is_stale()
    assert not proc.stop()
    assert is_alive(os.getpid())
