"""`up`, `down` and `status` over every component of the native stack: Kafka, the schema
registry, Prometheus, and a Spark standalone cluster when `spark_workers` asks for one.

`up` is idempotent: a live component is left alone, and a stale pidfile left by a SIGKILL is
reported, cleared, and the component is started again. Commands that only need a broker
(`leaderboard run`, `bank run`, the demo) call `up_kafka`, so they never start a Prometheus
in a home that nobody will stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from txstream.config import Settings
from txstream.stack.broker import BrokerError, KafkaBroker
from txstream.stack.cluster import KafkaCluster
from txstream.stack.process import ManagedProcess, needs_start
from txstream.stack.prometheus import PrometheusServer
from txstream.stack.registry import RegistryServer
from txstream.stack.spark import SparkMaster, SparkWorker


class State(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DEAD = "dead"  # pidfile present, process gone (killed or crashed)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    state: State
    pid: int | None
    detail: str


Report = Callable[[str], None]


class Component(Protocol):
    @property
    def process(self) -> ManagedProcess: ...

    @property
    def log_file(self) -> Path: ...

    def start(self) -> int: ...

    def answers(self, timeout_s: float = 2.0) -> bool: ...


class Stack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.broker = KafkaBroker(settings)
        self.cluster = KafkaCluster(settings)
        self.prometheus = PrometheusServer(settings)
        self.registry = RegistryServer(settings)
        self.spark_master = SparkMaster(settings)
        self.spark_workers = [SparkWorker(settings, i + 1) for i in range(settings.spark_workers)]

    def _spark(self) -> list[tuple[str, Component, str]]:
        if not self.spark_workers:
            return []
        master: tuple[str, Component, str] = (
            "spark-master",
            self.spark_master,
            self.spark_master.url,
        )
        return [master, *[(w.name, w, w.ui) for w in self.spark_workers]]

    def _components(self) -> list[tuple[str, Component, str]]:
        brokers: list[tuple[str, Component, str]] = [
            (node.name, node, node.address) for node in self.cluster.nodes
        ]
        registry: list[tuple[str, Component, str]] = (
            [("registry", self.registry, self.registry.url)] if self._runs_registry() else []
        )
        prometheus = ("prometheus", self.prometheus, self.prometheus.url)
        return [*brokers, *registry, prometheus, *self._spark()]

    def _runs_registry(self) -> bool:
        return self.registry.local and self.settings.kafka_security == "plaintext"

    def status(self) -> list[ComponentStatus]:
        return [_status(name, c, where) for name, c, where in self._components()]

    def up(self, report: Report) -> None:
        self.up_kafka(report)
        if self._runs_registry():
            _start("registry", self.registry, self.registry.url, report)
        elif not self.registry.local:
            report(f"using the external schema registry at {self.registry.url}")
        else:
            report("registry: not started on a secured stack (it has no principal of its own yet)")
        _start("prometheus", self.prometheus, self.prometheus.url, report)
        for name, component, where in self._spark():
            _start(name, component, where, report)
        if self.spark_workers:
            report(f"spark: run the ETL on it with TXSTREAM_SPARK_MASTER={self.spark_master.url}")

    def up_kafka(self, report: Report) -> None:
        if self.settings.kafka_bootstrap:
            if not self.broker.answers(timeout_s=5.0):
                raise BrokerError(
                    f"external Kafka at {self.settings.kafka_bootstrap} does not answer"
                )
            report(f"using external Kafka at {self.settings.kafka_bootstrap}")
            return
        self.cluster.start(report)

    def down(self, report: Report) -> None:
        # Workers a larger spark_workers started earlier are stopped too: by their pidfiles.
        workers = sorted(self.settings.run_dir.glob("spark-worker-*.pid"))
        for pidfile in workers:
            index = int(pidfile.stem.rsplit("-", 1)[1])
            stopped = SparkWorker(self.settings, index).process.stop()
            report(f"{pidfile.stem}: stopped" if stopped else f"{pidfile.stem}: not running")
        if self.spark_master.process.pidfile.exists():
            stopped = self.spark_master.process.stop()
            report("spark-master: stopped" if stopped else "spark-master: not running")
        stopped = self.prometheus.process.stop()
        report("prometheus: stopped" if stopped else "prometheus: not running")
        stopped = self.registry.process.stop()
        report("registry: stopped" if stopped else "registry: not running")
        self.cluster.stop(report)


def _status(name: str, component: Component, where: str) -> ComponentStatus:
    proc = component.process
    pid = proc.live_pid()
    if pid is not None:
        serving = "answering" if component.answers() else "not answering yet"
        return ComponentStatus(name, State.RUNNING, pid, f"{where} ({serving})")
    if proc.is_stale():
        detail = f"pidfile {proc.pidfile} names pid {proc.recorded_pid()}, which is gone"
        return ComponentStatus(name, State.DEAD, proc.recorded_pid(), detail)
    return ComponentStatus(name, State.STOPPED, None, "")


def _start(name: str, component: Component, where: str, report: Report) -> None:
    if needs_start(name, component.process, where, report):
        pid = component.start()
        report(f"{name}: running (pid {pid}), logs in {component.log_file}")
