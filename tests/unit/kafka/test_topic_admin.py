"""TopicAdmin's errors, where the broker's answer can be played without a broker."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin, TopicNotFoundError


def failing(code: int) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(KafkaException(KafkaError(code)))
    return future


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (KafkaError.UNKNOWN_TOPIC_OR_PART, TopicNotFoundError),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaAdminError),
    ],
)
def test_a_config_the_broker_does_not_know_yet_is_a_topic_not_found(
    monkeypatch: pytest.MonkeyPatch, code: int, error: type[KafkaAdminError]
) -> None:
    """In a cluster, metadata from one broker may name a new topic that the broker asked for
    its config does not know yet: callers wait on TopicNotFoundError, so it must be that."""
    admin = TopicAdmin(Settings(kafka_bootstrap="127.0.0.1:1"), timeout_s=1)

    monkeypatch.setattr(admin, "_topic", lambda name: SimpleNamespace(partitions={}))
    monkeypatch.setattr(admin, "_offsets", lambda *args: {})
    monkeypatch.setattr(
        admin._client,
        "describe_configs",
        lambda resources, request_timeout: {r: failing(code) for r in resources},
    )
    with pytest.raises(error) as e:
        admin.describe_topic("fresh")
    assert "describe the config of topic 'fresh'" in str(e.value)
    if error is KafkaAdminError:
        assert not isinstance(e.value, TopicNotFoundError)
