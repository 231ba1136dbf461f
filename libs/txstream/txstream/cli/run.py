"""`txstream run --app module:app`: the local development loop in one command.

It starts what is missing and owns what it starts: the local broker unless one answers,
the app's topics, a worker, a coordinator serving the console, and with `--sequencer` a
sequencer that finds the routes' schemas in the app.
While they run it prints what the worker commits, from the app's commit notices. Ctrl-C
(SIGINT) or SIGTERM stops the worker and coordinator with SIGTERM, which commit what they
hold and exit, then the broker if this run started it; work committed stays, and batches
not yet processed wait on their topics for the next run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from fastavro import schemaless_reader

from txstream.cli.app_option import app_or_exit
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import read_committed_consumer_config
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.app import App
from txstream.schemas import SchemaRegistry
from txstream.stack.broker import BrokerError
from txstream.stack.stack import Stack

STOP_WAIT_S = 30.0  # a service's clean stop; then SIGKILL


def run(
    app_spec: Annotated[str, typer.Option("--app", help="module:app (or module:factory)")],
    params: Annotated[str, typer.Option(help="The app's parameters, a JSON object.")] = "{}",
    console_port: Annotated[
        int, typer.Option(help="The console's port (a coordinator serves it); 0: none.")
    ] = 8080,
    progress_s: Annotated[
        float, typer.Option(min=0.1, help="Seconds between progress lines.")
    ] = 2.0,
    sequencer: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="A sequencer's TOML file: run it too."),
    ] = None,
) -> None:
    """Run an app locally: broker if none runs, topics, a worker and the console; Ctrl-C
    stops it all, committed work kept."""
    application = app_or_exit(app_spec, params)
    loop = LocalRun(application, app_spec, params, Settings())
    raise typer.Exit(loop.run(console_port, progress_s, sequencer))


class LocalRun:
    """The processes of one `txstream run`, started in order and stopped in reverse."""

    def __init__(self, app: App, spec: str, params: str, settings: Settings) -> None:
        self.app, self.spec, self.params, self.settings = app, spec, params, settings
        self.stack = Stack(settings)
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.started_kafka = False
        self.stopping = False

    def run(self, console_port: int, progress_s: float, sequencer: Path | None = None) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._stop)
        try:
            self._start_kafka()
            ensure_app_topics(TopicAdmin(self.settings), self.app, self.settings.kafka_partitions)
            self._spawn("worker", ["worker", "run"])
            if sequencer is not None:  # its schemas from the app, derived ones included
                self._spawn("sequencer", ["sequencer", "run", "--config", str(sequencer)])
            if console_port:
                self._spawn("coordinator", ["coordinator", "run", "--http-port", str(console_port)])
                say(f"console: http://127.0.0.1:{console_port}/console")
            say("running; Ctrl-C stops it, committed work kept")
            return self._watch(progress_s)
        except BrokerError as e:
            say(f"error: {e}")
            return 1
        finally:
            self._stop_all()

    def _start_kafka(self) -> None:
        external = bool(self.settings.kafka_bootstrap)
        live = any(node.process.live_pid() for node in self.stack.cluster.nodes)
        self.started_kafka = not external and not live
        self.stack.up_kafka(say)

    def _spawn(self, name: str, command: Sequence[str]) -> None:
        log = self.settings.log_dir / f"run-{self.app.name}-{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [_txstream(), *command, "--app", self.spec, "--params", self.params]
        with log.open("ab") as out:  # the child keeps its own descriptor
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        self.children.append((name, child))
        say(f"{name}: running (pid {child.pid}), logs in {log}")

    def _watch(self, progress_s: float) -> int:
        notices = CommitProgress(self.app, self.settings)
        try:
            next_line = time.monotonic() + progress_s
            while not self.stopping:
                for name, child in self.children:
                    if child.poll() is not None:
                        say(f"error: {name} exited with status {child.returncode}; see its log")
                        return 1
                notices.poll(0.2)
                if time.monotonic() >= next_line:
                    line = notices.line()
                    if line:
                        say(line)
                    next_line = time.monotonic() + progress_s
            return 0
        finally:
            notices.close()

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True

    def _stop_all(self) -> None:
        for _, child in reversed(self.children):
            if child.poll() is None:
                child.terminate()
        for name, child in reversed(self.children):
            try:
                child.wait(STOP_WAIT_S)
                say(f"{name}: stopped (status {child.returncode})")
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                say(f"{name}: did not stop in {STOP_WAIT_S:.0f} s; killed")
        if self.started_kafka:
            self.stack.cluster.stop(say)


class CommitProgress:
    """What the app's engines committed since the run began, from its commit notices."""

    def __init__(self, app: App, settings: Settings) -> None:
        topic = AppTopics(app.name).commits
        partitions = TopicAdmin(settings).partitions(topic)
        conf = read_committed_consumer_config(settings, f"txstream-run-{app.name}")
        self.consumer = Consumer(conf)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in partitions])
        self.schema = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")
        self.batches = self.executions = self.aborts = 0
        self.last: dict[str, int] = {}
        self.shown: tuple[int, int] = (-1, -1)

    def poll(self, timeout_s: float) -> None:
        for msg in self.consumer.consume(500, timeout=timeout_s):
            value = msg.value()
            if msg.error() is not None or not value:
                continue
            notice: Any = schemaless_reader(BytesIO(value), self.schema)
            self.batches += notice["batches"]
            self.executions += notice["executions"]
            self.aborts += notice["aborts"]
            for stream, batch_id in notice["last_batch_ids"].items():
                self.last[stream] = max(self.last.get(stream, 0), batch_id)

    def line(self) -> str | None:
        """A progress line, when anything was committed since the last one."""
        if (self.batches, self.aborts) == self.shown:
            return None
        self.shown = (self.batches, self.aborts)
        last = ", ".join(f"{s} {b}" for s, b in sorted(self.last.items()))
        return (f"committed {self.batches} batches ({self.executions} TEs, {self.aborts} "
                f"aborted); last batch: {last or '-'}")  # fmt: skip

    def close(self) -> None:
        self.consumer.close()


def _txstream() -> str:
    beside = Path(sys.executable).with_name("txstream")
    return str(beside) if beside.exists() else "txstream"


def say(line: str) -> None:
    print(f"txstream run: {line}", flush=True)
