"""The test session's broker is its own, never the developer's running stack: the topics
tests create would pile up on it and slow every later benchmark there."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.kafka_env import KafkaEnv
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin


def test_the_session_broker_is_not_the_configured_stack(
    kafka: KafkaEnv, new_topic: Callable[..., str]
) -> None:
    configured = Settings()
    assert kafka.settings.bootstrap_servers != configured.bootstrap_servers
    assert kafka.settings.home != configured.home
    made = new_topic("private")
    assert made in TopicAdmin(kafka.settings).list_topics()
