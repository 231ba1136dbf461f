"""The mirrors' query in a second Spark driver, at a lower CPU priority.

Why: on a local master one driver's JVM runs every query, and the changelog query's three
MERGEs and snapshot (about 75 Spark jobs per micro-batch) keep both cores busy, so the
facts' micro-batches wait for CPU, not for task slots (docs/performance-history.md, "The ETL's
micro-batches profiled"). In a process of its own under `nice`, the mirrors get the CPU the
facts leave, so they lag more, and without bound under a load that keeps the CPU busy: an
option (`etl run --split-drivers`), not the default. Only a local master is split: on a
cluster, two applications would compete for the same executors.

The pair is one service: the second driver dies with the first (`PR_SET_PDEATHSIG`, so a
SIGKILL of the first by pid takes both down, and each JVM follows its Python driver), and
the first stops its queries and exits when the second exits. The two share only the
appends to `etl_commits` (by delta-rs) and `quarantine` (by Spark, ordered by `shared.py`'s
lock).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Sequence

from pyspark.sql.streaming.query import StreamingQuery

from txstream_etl.config import WarehouseConfig

log = logging.getLogger("txstream.etl")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def splits(config: WarehouseConfig, raw_topic: str | None, master: str, once: bool) -> bool:
    """Whether a run can be split: streaming, on a local master, with mirrors and more."""
    others = bool(config.facts) or (raw_topic is not None and config.raw is not None)
    return not once and master.startswith("local") and bool(config.mirrors) and others


def follow(parent: int, niceness: int) -> None:
    """In the second driver, before Spark starts: die with the first (Spark's JVM, which
    inherits the niceness, follows its Python's death), yield the CPU to it, and stop when
    it says so (SIGTERM), not on a Ctrl-C: that reaches both, and the first stops this one
    once its own queries stopped."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the first died before the line above could take effect
        raise SystemExit(f"the first driver (pid {parent}) is gone")
    os.nice(niceness)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the queries stop as on a Ctrl-C


class SecondDriver:
    """The mirrors' driver, a child process of the first."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None  # set if it exited while the first ran
        self._stopping = threading.Event()

    def start(self, queries: list[StreamingQuery]) -> None:
        """Start it once this driver's queries run (its tables exist by then), and stop
        them if it exits. Same session: where sessions group the scheduler's shares
        (autogroup), a niceness counts only against processes of the same session."""
        self.proc = subprocess.Popen(self.argv)
        log.info("mirrors' driver started: pid %d", self.proc.pid)
        watch = threading.Thread(target=self._watch, args=(queries,), daemon=True)
        watch.start()

    def _watch(self, queries: list[StreamingQuery]) -> None:
        assert self.proc is not None
        code = self.proc.wait()
        if self._stopping.is_set():
            return
        self.exit_code = code
        log.error("the mirrors' driver (pid %d) exited with %d: stopping", self.proc.pid, code)
        for q in queries:
            q.stop()

    def exit_status(self) -> int | None:
        """The status to exit with if the second driver ended the run: its own, a signal's
        as a shell shows it (128 + n), and never 0 (a streaming run does not end by itself)."""
        code = self.exit_code
        if code is None:
            return None
        return 128 - code if code < 0 else code or 1

    def stop(self, grace_s: float = 60.0) -> None:
        """Stop it as a Ctrl-C would (`follow`); SIGKILL it if it does not exit in time."""
        self._stopping.set()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
