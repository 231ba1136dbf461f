"""The native stack as a three-broker KRaft cluster: replicated topics that outlive a broker.

`TXSTREAM_KAFKA_BROKERS=3` makes `txstream stack up` start three nodes, each a broker and a
controller voter. Every topic then has three replicas and needs two in sync, so a Kafka
transaction commits, and read_committed consumers see it, with any one broker SIGKILLed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.test_stack import processes_of
from tests.support.kafka_env import cluster_settings, free_port
from tests.support.kafka_reads import read_to_end
from txstream.config import Settings, project_root
from txstream.kafka.admin import TopicAdmin, TopicDescription, TopicNotFoundError
from txstream.kafka.clients import transactional_producer_config
from txstream.pids import is_alive
from txstream.stack.process import wait_exit

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")


def stack(args: list[str], settings: Settings) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TXSTREAM_HOME": str(settings.home),
        "TXSTREAM_KAFKA_BROKERS": str(settings.kafka_brokers),
        "TXSTREAM_KAFKA_PORT": str(settings.kafka_port),
        "TXSTREAM_KAFKA_CONTROLLER_PORT": str(settings.kafka_controller_port),
        "TXSTREAM_PROMETHEUS_PORT": str(free_port()),
        "TXSTREAM_SCHEMA_REGISTRY_URL": f"http://127.0.0.1:{free_port()}",
    }
    env.pop("TXSTREAM_KAFKA_BOOTSTRAP", None)
    return subprocess.run([TXSTREAM, "stack", *args], env=env, capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip


def kafka_pids(settings: Settings) -> dict[str, int]:
    run = settings.home / "run"
    return {p.stem: int(p.read_text()) for p in run.glob("kafka*.pid")}


def described_everywhere(admin: TopicAdmin, name: str, timeout_s: float = 30) -> TopicDescription:
    """The topic's description once the broker asked knows it: a new topic reaches each
    broker's metadata cache a moment apart."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.describe_topic(name)
        except TopicNotFoundError:
            assert time.monotonic() < deadline, f"{name} never appeared in a broker's metadata"
            time.sleep(0.1)


def commit_values(settings: Settings, topic: str, values: list[bytes]) -> None:
    producer = Producer(transactional_producer_config(settings, f"t-{uuid.uuid4().hex[:8]}"))
    producer.init_transactions(60)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.commit_transaction(60)


@pytest.mark.slow  # three brokers, one killed (~40 s): runs in make faults
@pytest.mark.timeout(600)
def test_three_brokers_replicate_and_commit_with_one_killed(tmp_path: Path) -> None:
    settings = cluster_settings(tmp_path / "home")
    home = str(settings.home)
    try:
        up = stack(["up"], settings)
        assert up.returncode == 0, up.stdout + up.stderr
        pids = kafka_pids(settings)
        assert sorted(pids) == ["kafka", "kafka-2", "kafka-3"], up.stdout
        assert all(is_alive(pid) for pid in pids.values())

        admin = TopicAdmin(settings, timeout_s=60)
        admin.create_topic("replicated", 1)
        described = described_everywhere(admin, "replicated")
        assert all(len(p.replicas) == 3 for p in described.partitions), described
        assert described.effective_config["min.insync.replicas"] == "2"

        os.kill(pids["kafka-2"], signal.SIGKILL)
        assert wait_exit(pids["kafka-2"], 30)
        commit_values(settings, "replicated", [b"a", b"b", b"c"])
        assert sorted(v for _, v in read_to_end(settings, "replicated")) == [b"a", b"b", b"c"]

        again = stack(["up"], settings)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "kafka-2: stale pidfile" in again.stdout
        assert "kafka already running" in again.stdout
        assert is_alive(kafka_pids(settings)["kafka-2"])

        running = kafka_pids(settings)
        down = stack(["down"], settings)
        assert down.returncode == 0, down.stdout + down.stderr
        assert not any(is_alive(pid) for pid in running.values())
    finally:
        for pid in processes_of(home):  # the stack's Prometheus too
            os.kill(pid, signal.SIGKILL)
