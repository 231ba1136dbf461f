"""The lock that orders Spark's commits to the tables every query appends to (`tables.SHARED`).

Why: with the mirrors' query in a driver of its own (`drivers.py`), two JVMs append to
`quarantine`. Delta's log store for local files makes a commit by checking that the next
log file is absent and then renaming a temporary file onto it; the rename overwrites, and
the check is ordered only among the threads of one JVM. Two drivers committing the same
version at once could each think it won, and one commit would be lost. A lock file on this
machine (both drivers always run here) orders those commits; Delta then retries the later
one at the next version, as it does for two queries in one driver. (`etl_commits` is
written by delta-rs, `driver_writes.py`, whose commits never overwrite: no lock.)

The JVM holds the lock, not Python: the JVM makes the commit, and when a driver's Python
process is killed, its JVM may finish a commit in flight before it exits. The lock is
released when the JVM exits, never before its last commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger("txstream.etl")
# A JVM cannot take its own file lock twice: its queries take turns here first.
_this_jvm = threading.Lock()


def lock_path(run_dir: Path, app: str) -> Path:
    return run_dir / f"etl-{app}.lock"


@contextmanager
def shared_commit(jvm: Any, path: Path) -> Iterator[None]:
    """Hold the app's lock, in the driver's JVM (`jvm`: py4j's view of it), while
    committing to a shared table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _this_jvm:
        asked = time.monotonic()
        channel = jvm.java.io.RandomAccessFile(str(path), "rw").getChannel()
        try:
            channel.lock()  # released by closing the channel, or by the JVM's exit
            if (waited := time.monotonic() - asked) >= 1.0:
                log.info("waited %.1fs for the other driver's commit to a shared table", waited)
            yield
        finally:
            channel.close()
