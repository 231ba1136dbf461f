"""Failpoints fire once, at the hit asked for, and a malformed spec is refused by name."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from txstream import failpoints


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    yield
    failpoints.arm("")


def test_drop_fires_once_at_the_nth_hit() -> None:
    failpoints.arm("coordinator.drop_prepare=drop@2")
    hits = [failpoints.hit("coordinator.drop_prepare") for _ in range(4)]
    assert hits == [False, True, False, False]
    assert failpoints.hit("coordinator.drop_decision") is False  # not armed


def test_unset_points_never_fire() -> None:
    failpoints.arm("")
    assert not any(failpoints.hit("engine.after_vote") for _ in range(3))


@pytest.mark.parametrize("spec", ["x=explode", "x=drop@two", "x"])
def test_malformed_spec_names_the_entry(spec: str) -> None:
    with pytest.raises(ValueError, match=r"must be name=kill\|stop\|drop"):
        failpoints.arm(spec)


def test_stop_freezes_the_process_at_the_point_until_it_is_woken() -> None:
    code = (
        "from txstream import failpoints\n"
        "failpoints.arm('x=stop@2')\n"
        "print(failpoints.hit('x'), flush=True)\n"
        "print(failpoints.hit('x'), flush=True)\n"
        "print('woken', flush=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "False\n"  # the first hit passes
        stat = Path(f"/proc/{proc.pid}/stat")
        deadline = time.monotonic() + 10
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
            assert time.monotonic() < deadline, "the second hit did not stop the process"
            time.sleep(0.01)
        proc.send_signal(signal.SIGCONT)
        assert proc.stdout.read() == "False\nwoken\n"  # not a drop; it goes on from there
        assert proc.wait(10) == 0
    finally:
        proc.kill()
