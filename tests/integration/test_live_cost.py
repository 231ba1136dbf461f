"""The live-cost benchmark's /proc reading: a thread that ends between listing a process's
threads and reading one of them is left out, not taken for the whole worker stopping."""

from __future__ import annotations

from pathlib import Path

from bench.live_cost import _thread_ticks


def _task(proc: Path, pid: int, tid: int, stat: str | None) -> None:
    task = proc / str(pid) / "task" / str(tid)
    task.mkdir(parents=True)
    if stat is not None:
        (task / "stat").write_text(stat)


def test_a_thread_that_ended_during_the_scan_is_left_out(tmp_path: Path) -> None:
    # fields after the name: state, then 10 more, then utime (7) and stime (5)
    _task(tmp_path, 40, 41, "41 (task-p0_0) S " + "0 " * 10 + "7 5 0 0")
    _task(tmp_path, 40, 42, None)  # listed, then gone before its stat was read
    assert _thread_ticks(40, tmp_path) == {"41": ("task-p0_0", 12)}
