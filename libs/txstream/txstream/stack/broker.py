"""A single-node KRaft Kafka broker run from the Maven Central jars.

Configured so Kafka transactions work on one node: every internal topic has replication
factor 1 and the transaction log accepts min.isr 1.
"""

from __future__ import annotations

import base64
import logging
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from txstream.config import Settings
from txstream.stack.process import ManagedProcess, port_free

SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{host}:{controller_port}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={log_dirs}
num.partitions={partitions}
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=5000
log.retention.hours=168
"""

LOG4J_PROPERTIES = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
"""


_SILENT = logging.getLogger("txstream.stack.probe")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


class BrokerError(RuntimeError):
    """The broker could not be started or did not become ready."""


@dataclass(frozen=True)
class KafkaBroker:
    settings: Settings

    @property
    def conf_dir(self) -> Path:
        return self.settings.home / "kafka"

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir / "kafka"

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / "kafka.log"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("kafka", self.settings.run_dir, marker=str(self.conf_dir))

    def start(self) -> int:
        """Format storage on first use, spawn the broker, and wait until it answers."""
        self._check_jars()
        self._check_port_free()
        self._write_config()
        self._format_once()
        pid = self.process.spawn(self._java_argv(), self.log_file)
        self.wait_ready(pid)
        return pid

    def answers(self, timeout_s: float = 2.0) -> bool:
        """True when a metadata request succeeds: the broker is serving clients.

        A closed port is checked first, so a stopped broker costs one refused connect rather
        than a librdkafka client retrying (and logging) until the timeout.
        """
        host, _, port = self.settings.bootstrap_servers.split(",")[0].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError:
            return False
        conf: dict[str, Any] = {"bootstrap.servers": self.settings.bootstrap_servers}
        conf["logger"] = _SILENT
        admin = AdminClient(conf)
        try:
            md = admin.list_topics(timeout=timeout_s)
        except Exception:
            return False
        return bool(md.brokers)

    def wait_ready(self, pid: int) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.live_pid() != pid:
                log = self.log_file
                raise BrokerError(f"kafka exited during startup; see {log}:\n{self._tail()}")
            if self.answers(timeout_s=1.0):
                return
            time.sleep(0.2)  # poll interval between readiness probes, not a stand-in for one
        raise BrokerError(
            f"kafka did not answer on {self.settings.bootstrap_servers} within "
            f"{self.settings.startup_timeout_s:.0f}s; see {self.log_file}"
        )

    def _check_jars(self) -> None:
        libs = self.settings.kafka_libs
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise BrokerError(f"no Kafka jars in {libs}; run `make setup` first")

    def _check_port_free(self) -> None:
        for port in (self.settings.kafka_port, self.settings.kafka_controller_port):
            if not port_free(self.settings.kafka_host, port):
                raise BrokerError(
                    f"port {self.settings.kafka_host}:{port} is in use by another process; "
                    "set TXSTREAM_KAFKA_PORT / TXSTREAM_KAFKA_CONTROLLER_PORT"
                )

    def _write_config(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        s = self.settings
        (self.conf_dir / "server.properties").write_text(
            SERVER_PROPERTIES.format(
                host=s.kafka_host,
                port=s.kafka_port,
                controller_port=s.kafka_controller_port,
                log_dirs=self.data_dir,
                partitions=s.kafka_partitions,
            )
        )
        (self.conf_dir / "log4j.properties").write_text(LOG4J_PROPERTIES)

    def _format_once(self) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_file = self.conf_dir / "cluster.id"
        if not cluster_file.exists():
            # Kafka wants a base64url-encoded 16-byte UUID.
            raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            cluster_file.write_text(raw)
        cluster_id = cluster_file.read_text().strip()
        result = subprocess.run(
            [
                *self._java_base(),
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                f"--cluster-id={cluster_id}",  # one token: ids may start with '-'
                "-c",
                str(self.conf_dir / "server.properties"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise BrokerError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")

    def _java_base(self) -> list[str]:
        return [
            "java",
            f"-Dlog4j.configuration=file:{self.conf_dir / 'log4j.properties'}",
            "-cp",
            f"{self.settings.kafka_libs}/*",
        ]

    def _java_argv(self) -> list[str]:
        heap = self.settings.kafka_heap
        base = self._java_base()
        return [
            base[0],
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            *base[1:],
            "kafka.Kafka",
            str(self.conf_dir / "server.properties"),
        ]

    def _tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
