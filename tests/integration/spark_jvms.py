"""The Spark JVMs of an app's ETL, found by command line, for the tests that SIGKILL it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def spark_jvms(app: str) -> list[int]:
    """Pids of the Spark JVMs of this app's ETL: pyspark passes the session's conf, with its
    `spark.app.name`, on the JVM's command line."""
    marker = f"spark.app.name=txstream-etl-{app}".encode()
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes():
                out.append(int(cmdline.parent.name))
        except OSError:
            continue
    return out


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
