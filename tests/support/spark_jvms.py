"""The Spark JVMs and drivers of an app's ETL, found by command line, for the tests that
SIGKILL it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

# How `etl run --split-drivers` exits when its mirrors' driver (`txstream_etl/drivers.py`)
# was SIGKILLed: it stops its own queries and exits as a shell reports a death by that signal.
KILLED_BY_ITS_MIRRORS = 128 + signal.SIGKILL


def _pids_with(marker: bytes) -> list[int]:
    """Pids of the processes whose command line holds `marker`."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes():
                out.append(int(cmdline.parent.name))
        except OSError:
            continue
    return out


def spark_jvms(app: str) -> list[int]:
    """Pids of the Spark JVMs of this app's ETL: pyspark passes the session's conf, with its
    `spark.app.name`, on the JVM's command line."""
    return _pids_with(f"spark.app.name=txstream-etl-{app}".encode())


def command_line(pid: int) -> list[str]:
    """A process's arguments (empty once it has exited)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def gone(app: str, timeout_s: float) -> bool:
    """Wait for the app's Spark JVMs to exit; SIGKILL (by pid) any left, and say so."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not spark_jvms(app):
            return True
        time.sleep(0.2)
    for pid in spark_jvms(app):  # found again by command line: never a reused pid
        os.kill(pid, signal.SIGKILL)
    return False


def mirrors_driver(first: int) -> int | None:
    """The pid of the mirrors' driver that `etl run` (pid `first`) started, if it has."""
    return next(iter(_pids_with(f"--second-of\0{first}\0".encode())), None)
