"""The native stack's Kafka: KRaft brokers run from the Maven Central jars.

One node by default, configured so Kafka transactions work on it alone (every internal
topic has replication factor 1, the transaction log accepts min.isr 1). With
`kafka_brokers = 3` the nodes form one cluster, each a broker and a controller voter, and
every topic, internal ones included, has three replicas and needs two in sync: a write
acknowledged survives the loss of any one broker.
"""

from __future__ import annotations

import base64
import logging
import socket
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from txstream.config import Settings
from txstream.cpus import pinning
from txstream.kafka.clients import common_config
from txstream.stack import security
from txstream.stack.process import ManagedProcess, port_free, wait_answering

SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id={node}
controller.quorum.voters={voters}
listeners={listener}://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners={listener}://{host}:{port}
controller.listener.names=CONTROLLER
log.dirs={log_dirs}
num.partitions={partitions}
auto.create.topics.enable=false
offsets.topic.replication.factor={replication}
offsets.topic.num.partitions=4
transaction.state.log.replication.factor={replication}
transaction.state.log.min.isr={min_insync}
default.replication.factor={replication}
min.insync.replicas={min_insync}
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=5000
log.retention.hours=168
"""

PLAINTEXT_PROPERTIES = """\
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
"""

# Kafka 4 logs through log4j 2; the same settings in its format.
LOG4J2_PROPERTIES = """\
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.stdout.ref=STDOUT
logger.server.name=kafka.server.BrokerServer
logger.server.level=INFO
"""


_SILENT = logging.getLogger("txstream.stack.probe")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


class BrokerError(RuntimeError):
    """The broker could not be started or did not become ready."""


@dataclass(frozen=True)
class KafkaBroker:
    """Node `node` (1-based) of the local cluster; node 1 alone is the default broker."""

    settings: Settings
    node: int = 1

    @property
    def name(self) -> str:
        return "kafka" if self.node == 1 else f"kafka-{self.node}"

    @property
    def port(self) -> int:
        return self.settings.kafka_port + self.node - 1

    @property
    def controller_port(self) -> int:
        return self.settings.kafka_controller_port + self.node - 1

    @property
    def address(self) -> str:
        return f"{self.settings.kafka_host}:{self.port}"

    @property
    def conf_dir(self) -> Path:
        return self.settings.home / self.name

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir / self.name

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / f"{self.name}.log"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess(self.name, self.settings.run_dir, marker=str(self.conf_dir))

    def start(self) -> int:
        """Format storage on first use, spawn the broker, and wait until it answers.

        A node of a cluster answers only once a quorum of controllers runs: start the
        cluster's nodes together with `KafkaCluster.start`, or one alone when the others
        are up (as after a kill)."""
        pid = self.spawn()
        self.wait_ready(pid)
        return pid

    def spawn(self) -> int:
        """Format storage on first use and spawn the broker, without waiting for it."""
        pin = pinning(self.settings.kafka_cpu_set, "kafka_cpus")  # refused before any change
        self._check_jars()
        self._check_port_free()
        if self.settings.secure:
            security.ensure_secrets(self.settings)
            security.ensure_tls(self.settings)
        self._write_config()
        self._format_once()
        return self.process.spawn(self._java_argv(), self.log_file, pin=pin)

    def answers(self, timeout_s: float = 2.0) -> bool:
        """True when a metadata request succeeds: the broker is serving clients.

        A closed port is checked first, so a stopped broker costs one refused connect rather
        than a librdkafka client retrying (and logging) until the timeout.
        """
        if self.settings.kafka_bootstrap:
            address = self.settings.kafka_bootstrap
            host, _, port = address.split(",")[0].rpartition(":")
        else:
            address, host, port = self.address, self.settings.kafka_host, str(self.port)
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError:
            return False
        try:
            conf: dict[str, Any] = {**common_config(self._admin()), "bootstrap.servers": address}
        except ValueError:  # secured, and its secrets are not made yet: not this stack's broker
            return False
        conf["logger"] = _SILENT
        admin = AdminClient(conf)
        try:
            md = admin.list_topics(timeout=timeout_s)
        except Exception:
            return False
        return bool(md.brokers)

    def _admin(self) -> Settings:
        """The settings the stack's own probes connect with: as `admin` when secured."""
        return self.settings.as_service("admin") if self.settings.secure else self.settings

    def wait_ready(self, pid: int) -> None:
        wait_answering(self.process, pid, lambda: self.answers(timeout_s=1.0),
                       self.settings.startup_timeout_s, (self.name, self.address, self.log_file),
                       BrokerError)  # fmt: skip

    def _check_jars(self) -> None:
        libs = self.settings.kafka_libs
        if not any(libs.glob("kafka_2.13-*.jar")):
            raise BrokerError(f"no Kafka jars in {libs}; run `make setup` first")

    def _check_port_free(self) -> None:
        for port in (self.port, self.controller_port):
            if not port_free(self.settings.kafka_host, port):
                raise BrokerError(
                    f"port {self.settings.kafka_host}:{port} is in use by another process; "
                    "set TXSTREAM_KAFKA_PORT / TXSTREAM_KAFKA_CONTROLLER_PORT"
                )

    def server_properties(self) -> str:
        s = self.settings
        tail = security.broker_properties(s) if s.secure else PLAINTEXT_PROPERTIES
        return (
            SERVER_PROPERTIES.format(
                listener="SASL_SSL" if s.secure else "PLAINTEXT",
                node=self.node,
                voters=",".join(
                    f"{n}@{s.kafka_host}:{s.kafka_controller_port + n - 1}"
                    for n in range(1, s.kafka_brokers + 1)
                ),
                host=s.kafka_host,
                port=self.port,
                controller_port=self.controller_port,
                log_dirs=self.data_dir,
                partitions=s.kafka_partitions,
                replication=s.kafka_replication,
                min_insync=s.kafka_min_insync,
            )
            + tail
        )

    def _write_config(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "server.properties").write_text(self.server_properties())
        (self.conf_dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def _format_once(self) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        # one id for every node of the cluster, kept beside node 1's config
        cluster_file = self.settings.home / "kafka" / "cluster.id"
        cluster_file.parent.mkdir(parents=True, exist_ok=True)
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
                *(security.scram_format_args(self.settings) if self.settings.secure else []),
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
            f"-Dlog4j2.configurationFile={self.conf_dir / 'log4j2.properties'}",
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
            *self.settings.kafka_jvm_options.split(),
            *base[1:],
            "kafka.Kafka",
            str(self.conf_dir / "server.properties"),
        ]
