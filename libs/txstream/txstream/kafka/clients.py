"""confluent-kafka client configs, all built from `Settings`.

librdkafka's own log lines (e.g. every failed connection attempt) go to the `txstream.kafka`
logger instead of straight to stderr, so command output stays readable while an application
that configures logging still sees them.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from txstream.config import Settings

SCRAM = "SCRAM-SHA-512"

log = logging.getLogger("txstream.kafka")
log.addHandler(logging.NullHandler())


def common_config(settings: Settings) -> dict[str, Any]:
    """What every client needs, admin clients included: the cluster, its credentials and
    the log routing."""
    conf: dict[str, Any] = {"bootstrap.servers": settings.bootstrap_servers, "logger": log}
    if settings.secure:
        conf |= {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": SCRAM,
            "sasl.username": settings.kafka_user,
            "sasl.password": settings.kafka_secret(),
            "ssl.ca.location": str(settings.ca_file),
        }
    return conf


def transactional_producer_config(settings: Settings, transactional_id: str) -> dict[str, Any]:
    """A producer whose sends are all-or-nothing per Kafka transaction.

    `transactional_id` must be stable for one logical writer (e.g. one partition engine) so a
    restarted writer fences its zombie predecessor, and unique across concurrent writers.
    """
    if not transactional_id:
        raise ValueError("a transactional producer needs a non-empty transactional.id")
    return {
        **idempotent_producer_config(settings),
        "transactional.id": transactional_id,
    }


def idempotent_producer_config(settings: Settings) -> dict[str, Any]:
    """A producer whose retries never duplicate or reorder records within a partition."""
    return {**common_config(settings), "enable.idempotence": True, "acks": "all"}


def read_committed_consumer_config(
    settings: Settings, group_id: str, *, from_beginning: bool = True
) -> dict[str, Any]:
    """A consumer that sees only committed transactions and never commits offsets on its own.

    Exactly-once readers commit their input positions inside their output transaction, so
    auto-commit is off; `from_beginning` applies only where the group has no position yet.
    """
    return {
        **common_config(settings),
        "group.id": group_id,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
    }


def delivery_failure(
    producer: Producer, failures: list[KafkaError], timeout_s: float = 30.0
) -> KafkaException:
    """Why a transaction's records were not delivered, as an exception to raise.

    A transaction that failed (a topic the principal may not write, say) purges its queued
    records, whose callbacks then say only "Purged in queue": the cause is the transaction's
    own error, which its commit (refused: an aborted or failed transaction never commits)
    reports. The caller aborts the transaction after this."""
    cause = next((f for f in failures if f.code() != KafkaError._PURGE_QUEUE), None)
    if cause is not None:
        return KafkaException(cause)
    try:
        producer.commit_transaction(timeout_s)
    except KafkaException as e:
        return e
    raise RuntimeError("a transaction whose records were purged committed")  # never: see above


def error_text(e: KafkaException) -> str:
    """librdkafka's human-readable reason rather than the KafkaError{code=...} repr."""
    err = e.args[0] if e.args else None
    return err.str() if isinstance(err, KafkaError) else str(e)


def send(producer: Producer, topic: str, value: bytes | None, **kwargs: Any) -> None:
    """`producer.produce`, waiting while librdkafka's local queue is full instead of failing.

    `kwargs` are passed on (`key`, `partition`, `on_delivery`, `headers`).
    """
    while True:
        try:
            producer.produce(topic, value, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)  # the local queue is full: let deliveries drain it


def send_many(
    producer: Producer, topic: str, messages: list[dict[str, Any]], partition: int
) -> None:
    """`producer.produce_batch`: one call, one queue lock, for many records of one topic
    partition (each a dict of `value`, `key`, `callback`), in their order.

    librdkafka goes on past a refused record, so a queue that drains mid-call could take a
    later record and not an earlier one. Only a refused tail, for a full local queue, is
    retried (once deliveries drained it); any other refusal raises, and the caller's
    transaction, aborted, leaves nothing out of order.
    """
    pending = messages
    while pending:
        producer.produce_batch(topic, pending, partition=partition)
        first = next((i for i, m in enumerate(pending) if "_error" in m), None)
        if first is None:
            return
        tail = pending[first:]
        err = tail[0]["_error"]
        if not (isinstance(err, KafkaError) and err.code() == KafkaError._QUEUE_FULL):
            raise KafkaException(err)
        if any("_error" not in m for m in tail):
            taken = KafkaError(KafkaError._FAIL, f"{topic}: a later record taken, an earlier not")
            raise KafkaException(taken)
        for m in tail:
            del m["_error"]
        pending = tail
        producer.poll(0.05)


class DeliveryLatch:
    """The delivery errors of one producer's records since the last `reset`, kept from
    the callback (librdkafka's thread) until the owner checks: a failed send is never lost
    between its callback and the check. Pass the latch itself as `on_delivery`."""

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, _: Message | None) -> None:
        if err is not None:
            self.errors.append(err)

    def reset(self) -> None:
        self.errors = []

    def check(self, what: str) -> None:
        """Raise, naming `what` was sent, if any record failed."""
        if self.errors:
            raise RuntimeError(f"{what} not delivered: {self.errors[0]}")
