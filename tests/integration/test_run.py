"""`txstream run`: the local loop on a private home with no broker running. It starts its
own broker, a worker and the console; batches sent with `BatchProducer` come out; SIGINT
leaves no process of its behind, and batches it had not processed are processed by the
next run, each once."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import textwrap
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kafka_env import free_port
from txstream import App, BatchProducer
from txstream.config import Settings, project_root
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.read import read_to_committed_end
from txstream.pids import is_alive
from txstream.schemas import BatchCodec
from txstream.stack.process import wait_exit

pytestmark = pytest.mark.kafka

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")
APP = """
    from typing import TypedDict

    from txstream import App


    class View(TypedDict):
        page: str
        views: int


    app = App("runloop")
    views = app.stream("views", schema=View)
    doubled = app.stream("doubled", schema=View)


    @app.procedure(input=views, outputs=[doubled])
    def double(ctx, batch):
        for row in batch:
            ctx.emit(doubled, {"page": row["page"], "views": 2 * row["views"]})
"""


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Run:
    def __init__(
        self, cwd: Path, env: dict[str, str], console: int, extra: Sequence[str] = ()
    ) -> None:
        self.log = cwd / f"run-{time.monotonic_ns()}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [TXSTREAM, "run", "--app", "runflow:app", "--console-port", str(console),
                 "--progress-s", "0.5", *extra],
                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for("the run to start", lambda: "running; Ctrl-C" in self.text() or
                 self.proc.poll() is not None)  # fmt: skip
        assert self.proc.poll() is None, self.text()

    def text(self) -> str:
        return self.log.read_text()

    def pids(self) -> list[int]:
        return [int(p) for p in re.findall(r"\(pid (\d+)\)", self.text())]

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=120)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.pids():
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Loop:
    """The app module in the test's folder, a private home and ports with no broker
    running, as the `txstream run` under test and the test itself see them."""

    env: dict[str, str]
    settings: Settings
    app: App


@pytest.fixture
def loop(tmp_path: Path) -> Loop:
    (tmp_path / "runflow.py").write_text(textwrap.dedent(APP))
    kafka_port, controller_port = free_port(), free_port()
    env = {**os.environ, "TXSTREAM_HOME": str(tmp_path / "home"),
           "TXSTREAM_KAFKA_PORT": str(kafka_port),
           "TXSTREAM_KAFKA_CONTROLLER_PORT": str(controller_port)}  # fmt: skip
    env.pop("TXSTREAM_KAFKA_BOOTSTRAP", None)
    settings = Settings(home=tmp_path / "home", kafka_port=kafka_port,
                        kafka_controller_port=controller_port)  # fmt: skip
    spec = importlib.util.spec_from_file_location("runflow", tmp_path / "runflow.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Loop(env, settings, module.app)


def output(settings: Settings, app: App) -> list[int]:
    """The batch ids of every committed batch on `doubled`."""
    codec = BatchCodec(app.schema_registry(settings.schema_dir).get("runloop.View"))
    values = [m.value() or b"" for m in read_to_committed_end(settings, "runloop.doubled", 0)]
    return [codec.decode(v).batch_id for v in values]


def test_run_starts_what_is_missing_and_sigint_stops_it_keeping_every_batch(
    tmp_path: Path, loop: Loop
) -> None:
    env, settings, app = loop.env, loop.settings, loop.app
    console = free_port()
    runs: list[Run] = []
    try:
        first = Run(tmp_path, env, console)
        runs.append(first)
        assert re.search(r"kafka: running \(pid \d+\)", first.text()), first.text()
        with BatchProducer(app, settings) as producer:
            for n in range(3):
                producer.send("views", [{"page": f"/{n}", "views": n}])
        wait_for("three batches out", lambda: len(output(settings, app)) == 3)
        wait_for("a progress line", lambda: "committed 3 batches" in first.text())
        page = urllib.request.urlopen(f"http://127.0.0.1:{console}/console", timeout=10)
        assert page.status == 200
        with BatchProducer(app, settings) as producer:  # sent, then stopped at once
            for n in range(3, 6):
                producer.send("views", [{"page": f"/{n}", "views": n}])
        assert first.interrupt() == 0, first.text()
        for pid in first.pids():
            assert wait_exit(pid, 10), f"pid {pid} outlived the run:\n{first.text()}"
        second = Run(tmp_path, env, console)
        runs.append(second)
        wait_for("six batches out", lambda: len(output(settings, app)) >= 6)
        assert sorted(output(settings, app)) == [1, 2, 3, 4, 5, 6], "each batch once"
        assert second.interrupt() == 0, second.text()
        for pid in second.pids():
            assert wait_exit(pid, 10), f"pid {pid} outlived the run:\n{second.text()}"
    finally:
        for run in runs:
            run.kill()


SEQUENCER = """
name = "runloop-raw"
commit_interval_ms = 100

[[routes]]
topic = "raw-views"
app = "runloop"
stream = "views"
schema = "runloop.View"
format = "json"
policy_events = 1
seal_after_ms = 100
"""


def test_run_with_a_sequencer_seals_raw_events_of_a_typed_stream(
    tmp_path: Path, loop: Loop
) -> None:
    """`--sequencer`: the sequencer runs too and finds the route's schema, derived from
    the app's TypedDict, in the app (no `.avsc` exists); raw events sent to its route by
    `BatchProducer.send_events` come out sealed; SIGINT stops it with the rest."""
    (tmp_path / "sequencer.toml").write_text(SEQUENCER)
    env, settings, app = loop.env, loop.settings, loop.app
    run = Run(tmp_path, env, 0, ["--sequencer", str(tmp_path / "sequencer.toml")])
    try:
        assert "sequencer: running (pid" in run.text(), run.text()
        TopicAdmin(settings).create_topic("raw-views", 1)
        events = [{"page": f"/{n}", "views": n} for n in range(4)]
        with BatchProducer(app, settings, sequencer=tmp_path / "sequencer.toml") as producer:
            assert producer.send_events("views", events) == 4

        def four_or_ended() -> bool:
            return run.proc.poll() is not None or len(output(settings, app)) == 4

        wait_for("four sealed batches out", four_or_ended)
        assert run.proc.poll() is None, f"the run ended:\n{run.text()}"
        assert run.interrupt() == 0, run.text()
        for pid in run.pids():
            assert wait_exit(pid, 10), f"pid {pid} outlived the run:\n{run.text()}"
    finally:
        run.kill()
