"""Fixtures of the tests that read metrics through a private, real Prometheus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka_env import KafkaEnv, free_port
from txstream.config import Settings
from txstream.stack.prometheus import PrometheusServer


@pytest.fixture
def scraped(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    """The session broker, a private home, and a Prometheus port of the test's own,
    scraped every half second."""
    return kafka.settings.model_copy(
        update={
            "home": tmp_path / "home",
            "prometheus_port": free_port(),
            "prometheus_scrape_interval_s": 0.5,
        }
    )


@pytest.fixture
def prometheus(scraped: Settings) -> Iterator[PrometheusServer]:
    server = PrometheusServer(scraped)
    try:  # interrupted while it starts, it must not stay running
        server.start()
        yield server
    finally:
        server.process.stop()
