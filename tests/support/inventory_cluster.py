"""The inventory app on the real broker: worker and coordinator processes a test starts
and kills (SIGKILL), and a client to drive it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.kafka_reads import read_to_end
from tests.support.sequencer_driver import unique
from tests.support.service_cluster import ServiceCluster
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.oltp.messages import TxnResult, Wire
from txstream.schemas.registry import SchemaRegistry


class InventoryCluster(ServiceCluster):
    def __init__(self, settings: Settings, tmp: Path, partitions: int = 4) -> None:
        self.settings, self.tmp, self.partitions = settings, tmp, partitions
        self.name = unique("inventory").replace("-", "_")
        self.topics = AppTopics(self.name)
        ensure_topics(TopicAdmin(settings), self.topics, [], partitions, oltp=True)
        self.app = ["--app", "inventory.dataflow:from_params",
                    "--params", json.dumps({"name": self.name})]  # fmt: skip
        self.processes: list[ServiceProcess] = []

    def start(self, kind: str, n: int = 0) -> ServiceProcess:
        """A `worker` (instance `n`) or the `coordinator`."""
        args = ["worker", "run", "--metrics-port", "0", "--instance-id", str(n)]
        if kind == "coordinator":
            args = ["coordinator", "run", "--http-port", "0", "--metrics-port", "0"]
        proc = ServiceProcess(self.settings, [*args, *self.app], self.tmp / f"{kind}-{n}.log")
        self.processes.append(proc)
        return proc

    def statuses(self) -> list[TxnResult]:
        """Every final status the coordinator published, in order."""
        wire = Wire(SchemaRegistry(self.settings.schema_dir))
        return [
            wire.decode(TxnResult, value)
            for _, value in read_to_end(self.settings, self.topics.statuses)
        ]


class KillSchedule:
    """The coordinator and two workers of `cluster`, each SIGKILLed and started again at
    set points of a run: the kth of `targets` once the run has passed k+1 of len+1 equal
    shares of its `total` transactions (call it with the count done, as `progress`)."""

    def __init__(self, cluster: InventoryCluster, targets: list[str], total: int) -> None:
        self.cluster = cluster
        self.running: dict[str, ServiceProcess] = {
            "coordinator": cluster.start("coordinator"),
            "worker-0": cluster.start("worker", 0),
            "worker-1": cluster.start("worker", 1),
        }
        self.at = {total * (k + 1) // (len(targets) + 1): t for k, t in enumerate(targets)}
        self.killed: list[str] = []

    def __call__(self, done: int) -> None:
        target = self.at.get(done)
        if target is None:
            return
        self.running[target].kill()
        assert not self.running[target].alive()
        self.killed.append(target)
        kind, _, n = target.partition("-")
        self.running[target] = self.cluster.start(kind, int(n or 0))
