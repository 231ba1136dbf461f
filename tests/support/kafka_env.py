"""A test's own Kafka: free ports below the ephemeral range, private settings, and the
session broker's handle (`KafkaEnv`)."""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from pathlib import Path

from txstream.config import Settings

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free port below the kernel's ephemeral range.

    An ephemeral port can be taken by any client's outgoing connection; worse, a client
    retrying a dead broker on an ephemeral port can connect to itself (TCP self-connect)
    and hold the port the restarted broker needs. A port is handed out once per process:
    two draws for one server (say a Spark master's RPC and UI ports) must not be equal.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, min(low, 32_768))
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free port found below the ephemeral range")


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports below the ephemeral range."""
    for _ in range(200):
        base = free_port()
        rest = range(base + 1, base + count)
        if all(port not in _HANDED_OUT and _bindable(port) for port in rest):
            _HANDED_OUT.update(rest)
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_settings(home: Path, brokers: int = 3) -> Settings:
    """Settings for a private cluster of `brokers` nodes: two blocks of free ports."""
    clients = free_ports(brokers)
    controllers = free_ports(brokers)
    while abs(controllers - clients) < brokers:
        controllers = free_ports(brokers)
    return Settings(home=home, kafka_brokers=brokers, kafka_port=clients,
                    kafka_controller_port=controllers)  # fmt: skip


def private_settings(home: Path) -> Settings:
    """Settings for a stack of its own: its own home and ports, so it never meets another."""
    return Settings(home=home, kafka_port=free_port(), kafka_controller_port=free_port())


@dataclass(frozen=True)
class KafkaEnv:
    settings: Settings

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap_servers
