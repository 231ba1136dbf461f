"""CPU sets: parsing the settings, and keeping a child process to its set."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.support.proc_cpus import thread_cpu_lists
from txstream.config import Settings
from txstream.cpus import CpuSetError, checked, cpu_text, parse_cpus, pinning
from txstream.stack.process import ManagedProcess


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("", set()), ("  ", set()), ("0", {0}), ("1-3", {1, 2, 3}), ("0, 2-3,7", {0, 2, 3, 7})],
)
def test_cpu_lists_parse(text: str, cpus: set[int]) -> None:
    assert parse_cpus(text, "worker_cpus") == frozenset(cpus)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("1-x", "worker_cpus '1-x': '1-x' is not a CPU number or range"),
        ("0,,1", "worker_cpus '0,,1': '' is not a CPU number or range"),
        ("-1", "worker_cpus '-1': '-1' is not a CPU number or range"),
        ("3-1", "worker_cpus '3-1': the range '3-1' runs backwards"),
    ],
)
def test_a_bad_cpu_list_is_named_in_the_error(text: str, said: str) -> None:
    with pytest.raises(CpuSetError, match="^" + re.escape(said)):
        parse_cpus(text, "worker_cpus")


def test_a_bad_setting_fails_when_the_settings_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TXSTREAM_KAFKA_CPUS", "zero")
    with pytest.raises(ValidationError, match="kafka_cpus 'zero'"):
        Settings()


def test_ranges_print_compactly() -> None:
    assert cpu_text(frozenset({0, 1, 2, 5, 7, 8})) == "0-2,5,7-8"


def test_cpus_this_process_may_not_use_are_refused() -> None:
    beyond = max(os.sched_getaffinity(0)) + 1000
    with pytest.raises(CpuSetError, match=f"kafka_cpus: CPU {beyond} is not available here"):
        checked(frozenset({beyond}), "kafka_cpus")
    with pytest.raises(CpuSetError, match=f"CPU {beyond}"):
        pinning(frozenset({beyond}), "kafka_cpus")


def test_no_set_pins_nothing() -> None:
    assert pinning(frozenset(), "worker_cpus") is None


def test_a_spawned_process_and_its_threads_keep_to_the_set(tmp_path: Path) -> None:
    """A real child (a JVM-like process with threads: python starting some), pinned by the
    same hook the broker's spawn uses."""
    cpu = max(os.sched_getaffinity(0))
    proc = ManagedProcess("pinned", tmp_path / "run", marker="pinned-test")
    script = (
        "import threading, time\n" + "threading.Thread(target=time.sleep, args=(60,)).start()\n" * 3
    )
    ready = tmp_path / "ready"
    script += f"open({str(ready)!r}, 'w').close()\ntime.sleep(60)\n"
    pid = proc.spawn(["python3", "-c", script, "pinned-test"], tmp_path / "log",
                     pin=pinning(frozenset({cpu}), "kafka_cpus"))  # fmt: skip
    try:
        _wait_for(ready)
        lists = thread_cpu_lists(pid)
        assert len(lists) == 4 and set(lists.values()) == {str(cpu)}, lists
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def _wait_for(path: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
