"""The native stack's lifecycle through `make` and the CLI, on a private home and ports."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.kafka_env import free_port
from tests.support.proc_cpus import thread_cpu_lists
from tests.support.scale import LONG
from txstream.config import Settings, project_root
from txstream.pids import cmdline, is_alive
from txstream.stack.broker import KafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

ROOT = project_root()


@pytest.fixture
def stack_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TXSTREAM_HOME=str(tmp_path / "home"),
        TXSTREAM_KAFKA_PORT=str(free_port()),
        TXSTREAM_KAFKA_CONTROLLER_PORT=str(free_port()),
        TXSTREAM_PROMETHEUS_PORT=str(free_port()),
        TXSTREAM_SCHEMA_REGISTRY_URL=f"http://127.0.0.1:{free_port()}",
    )
    return env


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )


def processes_of(home: str) -> list[int]:
    """Every live process of this stack: those whose command line names its home, and those
    its pidfiles name (the schema registry's command line names only its port)."""
    pids = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    ours = {pid for pid in pids if home in cmdline(pid)}
    for pidfile in (Path(home) / "run").glob("*.pid"):
        text = pidfile.read_text().strip()
        if text.isdigit():
            ours.add(int(text))
    return sorted(pid for pid in ours if is_alive(pid))


def test_a_process_only_a_pidfile_names_is_the_stacks(tmp_path: Path) -> None:
    """So a failed assertion's clean-up kills it too."""
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    child = subprocess.Popen(["sleep", "60"])
    try:
        (home / "run" / "registry.pid").write_text(f"{child.pid}\n")
        assert child.pid in processes_of(str(home))
    finally:
        child.kill()
        child.wait()
    assert processes_of(str(home)) == []


def test_make_up_status_down_leaves_no_process(stack_env: dict[str, str]) -> None:
    """In `make faults`, with a Spark standalone cluster of two workers too (~20 s more).

    The stored cluster id starts with '-', as a random base64url id does about once in 32
    starts: the broker's storage format must take it as an id, not an option. The broker
    is kept to one CPU, as `kafka_cpus` asks."""
    workers = 2 if LONG else 0
    cpu = max(os.sched_getaffinity(0))  # the broker kept to one CPU (`kafka_cpus`)
    stack_env = stack_env | {
        "TXSTREAM_KAFKA_CPUS": str(cpu),
        "TXSTREAM_SPARK_WORKERS": str(workers),
        "TXSTREAM_SPARK_MASTER_PORT": str(free_port()),
        "TXSTREAM_SPARK_UI_PORT": str(free_port()),
    }
    home = stack_env["TXSTREAM_HOME"]
    pidfile = Path(home) / "run" / "kafka.pid"
    (Path(home) / "kafka").mkdir(parents=True)
    (Path(home) / "kafka" / "cluster.id").write_text("-AbCdEfGhIjKlMnOpQrStU")
    try:
        up = run(["make", "--no-print-directory", "up"], stack_env)
        assert up.returncode == 0, up.stdout + up.stderr
        pid = int(pidfile.read_text())
        assert is_alive(pid)
        # the broker's JVM took the default options (ZGC) and answers with them
        assert Settings().kafka_jvm_options in cmdline(pid)
        assert set(thread_cpu_lists(pid).values()) == {str(cpu)}  # every JVM thread
        prometheus = int((Path(home) / "run" / "prometheus.pid").read_text())
        assert is_alive(prometheus)
        registry = int((Path(home) / "run" / "registry.pid").read_text())
        assert is_alive(registry)
        names = ["spark-master", "spark-worker-1", "spark-worker-2"] if workers else []
        spark = [int((Path(home) / "run" / f"{name}.pid").read_text()) for name in names]
        assert all(is_alive(p) for p in spark)
        master = f"spark://127.0.0.1:{stack_env['TXSTREAM_SPARK_MASTER_PORT']}"
        assert (master in up.stdout) == bool(workers), up.stdout

        status = run(["make", "--no-print-directory", "status"], stack_env)
        assert status.returncode == 0, status.stdout
        assert "running" in status.stdout and str(pid) in status.stdout
        assert str(prometheus) in status.stdout
        port = stack_env["TXSTREAM_PROMETHEUS_PORT"]
        assert f"http://127.0.0.1:{port} (answering)" in status.stdout
        assert f"{stack_env['TXSTREAM_SCHEMA_REGISTRY_URL']} (answering)" in status.stdout
        for name in names:
            assert name in status.stdout
        assert status.stdout.count("(answering)") >= 3 + len(names), status.stdout

        down = run(["make", "--no-print-directory", "down"], stack_env)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not is_alive(pid) and not is_alive(prometheus) and not is_alive(registry)
        assert not any(is_alive(p) for p in spark)
        assert not pidfile.exists()
        assert processes_of(home) == []
    finally:
        for pid in processes_of(home):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # a stack started, SIGKILLed, restarted (~35 s): make faults
def test_up_twice_is_a_noop_and_sigkill_is_reported_then_restarted(
    stack_env: dict[str, str],
) -> None:
    txstream = str(ROOT / ".venv" / "bin" / "txstream")
    home = stack_env["TXSTREAM_HOME"]
    pidfile = Path(home) / "run" / "kafka.pid"
    try:
        assert run([txstream, "stack", "up"], stack_env).returncode == 0
        first = int(pidfile.read_text())

        again = run([txstream, "stack", "up"], stack_env)
        assert again.returncode == 0
        assert "already running" in again.stdout and "nothing to do" in again.stdout
        assert int(pidfile.read_text()) == first

        os.kill(first, signal.SIGKILL)
        dead = run([txstream, "stack", "status"], stack_env)
        assert dead.returncode == 1
        assert "dead" in dead.stdout and str(first) in dead.stdout

        restarted = run([txstream, "stack", "up"], stack_env)
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        assert "stale pidfile" in restarted.stdout
        second = int(pidfile.read_text())
        assert second != first and is_alive(second)
        settings = Settings(
            home=Path(home),
            kafka_port=int(stack_env["TXSTREAM_KAFKA_PORT"]),
            kafka_controller_port=int(stack_env["TXSTREAM_KAFKA_CONTROLLER_PORT"]),
        )
        assert KafkaBroker(settings).answers()

        assert run([txstream, "stack", "down"], stack_env).returncode == 0
        assert processes_of(home) == []
    finally:
        for pid in processes_of(home):
            os.kill(pid, signal.SIGKILL)
