"""The ETL's two drivers as processes (`drivers.py`) and their shared-table lock
(`shared.py`): real child processes, real JVMs (py4j's, as a driver has) and a real lock
file, no Spark."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from py4j.java_gateway import JavaGateway

from txstream.config import project_root
from txstream_etl.config import load_config
from txstream_etl.drivers import SecondDriver, splits
from txstream_etl.job import MirrorsAt, RunOptions
from txstream_etl.plan import Plan
from txstream_etl.shared import shared_commit
from txstream_etl.warehouse import MIRRORS_QUERY, Query

LEADERBOARD = load_config(project_root() / "apps/leaderboard/warehouse.toml")
LOCAL = "local[2]"


def test_a_streaming_run_on_a_local_master_with_mirrors_and_facts_can_split() -> None:
    assert splits(LEADERBOARD, None, LOCAL, once=False)
    assert not splits(LEADERBOARD, None, LOCAL, once=True)
    assert not splits(LEADERBOARD, None, "spark://127.0.0.1:7077", once=False)


def test_a_run_with_one_kind_of_query_does_not_split() -> None:
    mirrors_only = dataclasses.replace(LEADERBOARD, facts=())
    assert not splits(mirrors_only, None, LOCAL, once=False)
    assert splits(mirrors_only, "raw-votes", LOCAL, once=False)  # the raw ingest is the other
    assert not splits(dataclasses.replace(LEADERBOARD, mirrors=()), None, LOCAL, once=False)


def test_each_driver_runs_its_own_queries() -> None:
    plan = Plan("schemas", {})
    queries = [Query(name, plan, {}) for name in ("streams", MIRRORS_QUERY, "ingest")]

    def names(mirrors: MirrorsAt) -> list[str]:
        options = RunOptions(mirrors=mirrors)
        return [q.name for q in queries if options.runs(q)]

    assert names("here") == ["streams", MIRRORS_QUERY, "ingest"]
    assert names("elsewhere") == ["streams", "ingest"]
    assert names("only") == [MIRRORS_QUERY]


class FakeQuery:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def wait_for(condition: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL),
        ("sys.exit(2)", 2),
        ("sys.exit(0)", 1),
    ],
)
def test_the_second_driver_exiting_stops_the_first_with_its_status(code: str, status: int) -> None:
    second = SecondDriver([sys.executable, "-c", f"import os, signal, sys; {code}"])
    queries = [FakeQuery(), FakeQuery()]
    second.start(queries)  # type: ignore[arg-type]
    wait_for(lambda: all(q.stopped for q in queries))
    assert second.exit_status() == status
    second.stop()


def test_stopping_the_second_driver_is_not_its_failure() -> None:
    second = SecondDriver([sys.executable, "-c", "import time; time.sleep(120)"])
    queries = [FakeQuery()]
    second.start(queries)  # type: ignore[arg-type]
    second.stop(grace_s=30)
    assert second.proc is not None and second.proc.returncode == -signal.SIGTERM
    assert second.exit_status() is None and not queries[0].stopped


# The first driver, as a process: starts the second (which `follow`s it), prints its pid,
# and waits to be killed.
FIRST = textwrap.dedent(
    """
    import os, subprocess, sys, time
    follower = (
        "import time; from txstream_etl.drivers import follow; "
        f"follow({os.getpid()}, 19); time.sleep(300)"
    )
    child = subprocess.Popen([sys.executable, "-c", follower])
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def ignores_sigint(pid: int) -> bool:
    """Set last by `follow`, so it also says that the rest is done."""
    status = Path(f"/proc/{pid}/status").read_text()
    (mask,) = (line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_second_driver_dies_with_the_first_and_yields_the_cpu() -> None:
    first = subprocess.Popen([sys.executable, "-c", FIRST], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    child = int(first.stdout.readline())
    try:
        wait_for(lambda: alive(child) and ignores_sigint(child))
        assert nice(child) == 19
        os.kill(child, signal.SIGINT)  # a Ctrl-C goes to the first; the second ignores it
        assert alive(child)
        first.kill()  # SIGKILL, by pid
        first.wait(30)
        wait_for(lambda: not alive(child))
    finally:
        first.kill()
        first.wait(30)
        if alive(child):  # it did not follow: not left behind either
            os.kill(child, signal.SIGKILL)


def test_the_second_driver_stops_on_sigterm() -> None:
    follower = (
        "import os, time; from txstream_etl.drivers import follow; "
        f"follow({os.getpid()}, 19); print('following', flush=True); time.sleep(300)"
    )
    child = subprocess.Popen([sys.executable, "-c", follower], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "following\n"
        child.terminate()
        assert child.wait(30) != 0  # KeyboardInterrupt: the queries stop as on a Ctrl-C
    finally:
        child.kill()
        child.wait(30)


def test_a_follower_whose_first_is_gone_exits() -> None:
    follower = "from txstream_etl.drivers import follow; follow(1, 19)"  # not its parent
    done = subprocess.run([sys.executable, "-c", follower], capture_output=True, text=True)
    assert done.returncode != 0 and "the first driver (pid 1) is gone" in done.stderr


# A driver's commit to a shared table, in a process with a JVM of its own (py4j's, as
# PySpark's driver has): prints once it holds the lock, then holds it until killed if told.
COMMITTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from py4j.java_gateway import JavaGateway
    from txstream_etl.shared import shared_commit
    gateway = JavaGateway.launch_gateway(die_on_exit=sys.argv[2] != "hold")
    with shared_commit(gateway.jvm, Path(sys.argv[1])):
        print("committed", flush=True)
        if sys.argv[2] == "hold":
            sys.stdin.read()
    gateway.shutdown()
    """
)


def lock_entries(path: Path) -> list[tuple[bool, int]]:
    """The locks on `path` in /proc/locks: (waiting, pid) each."""
    inode = f":{path.stat().st_ino} "
    out = []
    for line in Path("/proc/locks").read_text().splitlines():
        if inode in line:
            fields = line.split()
            waiting = fields[1] == "->"
            out.append((waiting, int(fields[5 if waiting else 4])))
    return out


@pytest.fixture
def jvm() -> Iterator[Any]:
    gateway = JavaGateway.launch_gateway(die_on_exit=True)
    yield gateway.jvm
    gateway.shutdown()


def test_a_shared_commit_waits_for_the_other_drivers(tmp_path: Path, jvm: Any) -> None:
    lock = tmp_path / "run" / "etl-app.lock"
    with shared_commit(jvm, lock):
        proc = subprocess.Popen(
            [sys.executable, "-c", COMMITTER, str(lock), "release"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(lambda: any(waiting for waiting, _ in lock_entries(lock)))
            assert proc.poll() is None
        except BaseException:
            proc.kill()
            raise
    assert proc.communicate(timeout=60)[0] == "committed\n"
    assert proc.returncode == 0


def test_a_killed_drivers_jvm_holds_the_lock_until_it_exits(tmp_path: Path, jvm: Any) -> None:
    """Its commit in flight may still land: the lock is the JVM's, not the Python's."""
    lock = tmp_path / "run" / "etl-app.lock"
    proc = subprocess.Popen(
        [sys.executable, "-c", COMMITTER, str(lock), "hold"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    its_jvm: list[int] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "committed\n"
        its_jvm = [
            int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        ]
        holders = [pid for waiting, pid in lock_entries(lock) if not waiting]
        assert holders == its_jvm, f"held by {holders}, not by the JVM {its_jvm}"
        proc.kill()  # the driver's Python, by pid
        proc.wait(30)
        channel = jvm.java.io.RandomAccessFile(str(lock), "rw").getChannel()
        try:
            assert channel.tryLock() is None, "released with the Python, before its JVM"
            os.kill(its_jvm[0], signal.SIGKILL)  # the JVM, by pid
            wait_for(lambda: channel.tryLock() is not None)
        finally:
            channel.close()
    finally:
        proc.kill()
        for pid in its_jvm:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
