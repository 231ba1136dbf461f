"""The local Kafka cluster: `kafka_brokers` nodes started together, stopped by pid.

KRaft nodes that are also controller voters only serve once a quorum of them runs, so a
cluster is started by spawning every node that is not running and then waiting for each;
starting them one at a time would wait forever on the first.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from txstream.config import Settings
from txstream.stack.broker import KafkaBroker
from txstream.stack.process import needs_start

Report = Callable[[str], None]


class KafkaCluster:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.nodes = [KafkaBroker(settings, n) for n in range(1, settings.kafka_brokers + 1)]

    def start(self, report: Report) -> None:
        """Start every node that is not running (clearing stale pidfiles), then wait."""
        spawned: list[tuple[KafkaBroker, int]] = []
        for node in self.nodes:
            if needs_start(node.name, node.process, node.address, report):
                spawned.append((node, node.spawn()))
        for node, pid in spawned:
            node.wait_ready(pid)
            report(f"{node.name}: running (pid {pid}), logs in {node.log_file}")

    def stop(self, report: Report) -> None:
        """Stop the nodes together: one at a time, the last ones wait out their shutdown
        timeout for a controller quorum that the first ones took with them."""
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            stopped = list(pool.map(lambda node: node.process.stop(), self.nodes))
        for node, done in zip(self.nodes, stopped, strict=True):
            report(f"{node.name}: stopped" if done else f"{node.name}: not running")
