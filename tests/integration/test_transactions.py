"""Kafka transactions on the real broker, through the client configs of txstream.kafka.clients.

The commit path (DESIGN 3.3) rests on these facts: a read_committed reader sees exactly the
committed transactions, and a producer with a reused transactional.id fences its predecessor.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaException, Producer

from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_until
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import (
    idempotent_producer_config,
    read_committed_consumer_config,
    transactional_producer_config,
)

pytestmark = pytest.mark.kafka

TIMEOUT_S = 30.0


def settings_for(kafka: KafkaEnv) -> Settings:
    return Settings(kafka_bootstrap=kafka.bootstrap)


def transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.flush(TIMEOUT_S)
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)


def test_read_committed_sees_exactly_the_committed_transactions(
    kafka: KafkaEnv, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("txn")
    settings = settings_for(kafka)
    producer = Producer(transactional_producer_config(settings, f"test-{uuid.uuid4().hex}"))
    producer.init_transactions(TIMEOUT_S)
    transaction(producer, topic, [b"c1", b"c2"], commit=True)
    transaction(producer, topic, [b"a1", b"a2"], commit=False)
    transaction(producer, topic, [b"c3"], commit=True)

    def saw_last(values: list[bytes]) -> bool:
        return b"c3" in values

    committed = read_committed_consumer_config(settings, f"test-{uuid.uuid4().hex}")
    assert read_until(committed, topic, saw_last) == [b"c1", b"c2", b"c3"]

    # The same read without the isolation level does see the aborted records: the test can tell.
    uncommitted = {**committed, "isolation.level": "read_uncommitted"}
    assert read_until(uncommitted, topic, saw_last) == [b"c1", b"c2", b"a1", b"a2", b"c3"]


def test_a_reused_transactional_id_fences_the_older_producer(
    kafka: KafkaEnv, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("fence")
    settings = settings_for(kafka)
    tid = f"test-{uuid.uuid4().hex}"
    zombie = Producer(transactional_producer_config(settings, tid))
    zombie.init_transactions(TIMEOUT_S)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(TIMEOUT_S)

    successor = Producer(transactional_producer_config(settings, tid))
    successor.init_transactions(TIMEOUT_S)  # aborts the zombie's open transaction
    transaction(successor, topic, [b"successor"], commit=True)

    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(TIMEOUT_S)
    assert info.value.args[0].fatal()

    committed = read_committed_consumer_config(settings, f"test-{uuid.uuid4().hex}")
    assert read_until(committed, topic, lambda v: b"successor" in v) == [b"successor"]


def test_an_idempotent_producer_delivers_once_in_order(
    kafka: KafkaEnv, new_topic: Callable[..., str]
) -> None:
    topic = new_topic("idem")
    settings = settings_for(kafka)
    producer = Producer(idempotent_producer_config(settings))
    sent = [f"v{i}".encode() for i in range(100)]
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0
    committed = read_committed_consumer_config(settings, f"test-{uuid.uuid4().hex}")
    assert read_until(committed, topic, lambda v: len(v) >= len(sent)) == sent
    (partition,) = TopicAdmin(settings).describe_topic(topic).partitions
    assert partition.end_offset == len(sent)  # no duplicate beyond what was read
