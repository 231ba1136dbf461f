"""Shared fixtures: one real Kafka broker per test session; the markers every test gets.

The broker is always the session's own, in a private home with free ports, stopped by pid
at the end, even when a developer's stack is up: tests leave hundreds of topics behind, and
a dev broker holding thousands ran a collection every few seconds and slowed every later
benchmark on it (docs/performance-history.md, "The broker's leftover topics", 2026-11-29).

Markers (registered in pyproject.toml): `make test` runs `-m "not slow"`, `make faults`
runs `-m "faults or slow"` at full length. A test is marked `faults` by living in
tests/faults, tests/property or tests/simulation, or by its module's `pytestmark`; `kafka`
by using the `kafka` fixture, or by its module's mark when it starts brokers of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.kafka_env import KafkaEnv, private_settings
from tests.support.scale import LONG
from txstream.kafka.admin import TopicAdmin
from txstream.stack.broker import KafkaBroker

_FAULT_DIRS = ("faults", "property", "simulation")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        kind = item.path.relative_to(tests).parts[0]
        if kind in _FAULT_DIRS:
            item.add_marker(pytest.mark.faults)
        if "kafka" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
        if item.get_closest_marker("slow") and not LONG:
            item.add_marker(pytest.mark.skip(reason="slow: runs in make faults"))


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaEnv]:
    settings = private_settings(tmp_path_factory.mktemp("kafka-home"))
    broker = KafkaBroker(settings)
    try:  # a run interrupted while the broker starts must not leave it running
        broker.start()
        yield KafkaEnv(settings)
    finally:
        broker.process.stop()


@pytest.fixture
def new_topic(kafka: KafkaEnv) -> Callable[..., str]:
    """A unique topic per call, usable on return: `new_topic("votes", partitions=2)`."""
    admin = TopicAdmin(kafka.settings)

    def make(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        admin.create_topic(name, partitions, config=config)
        return name

    return make
