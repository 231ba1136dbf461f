"""send_many: records of one partition reach the queue in order, or the call raises."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from txstream.kafka.clients import send_many

FULL = KafkaError(KafkaError._QUEUE_FULL)


class QueueProducer:
    """Takes at most `room` records per produce_batch call, as librdkafka marks the rest;
    `refuse` marks chosen positions of a call instead (per call, in order)."""

    def __init__(self, room: int, refuse: list[dict[int, KafkaError]] | None = None) -> None:
        self.room = room
        self.refuse = refuse or []
        self.queued: list[bytes] = []
        self.polls = 0

    def produce_batch(self, topic: str, messages: list[dict[str, Any]], partition: int) -> int:
        marks = self.refuse.pop(0) if self.refuse else {}
        taken = 0
        for i, m in enumerate(messages):
            if i in marks:
                m["_error"] = marks[i]
            elif not marks and taken >= self.room:
                m["_error"] = FULL
            else:
                self.queued.append(m["value"])
                taken += 1
        return taken

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def values(n: int) -> list[dict[str, Any]]:
    return [{"value": b"%d" % i} for i in range(n)]


def test_a_refused_tail_is_retried_in_order_after_the_queue_drains() -> None:
    producer = QueueProducer(room=3)
    send_many(producer, "t", values(8), partition=0)  # type: ignore[arg-type]
    assert producer.queued == [b"%d" % i for i in range(8)]
    assert producer.polls == 2


def test_a_later_record_taken_after_an_earlier_refused_raises() -> None:
    producer = QueueProducer(room=10, refuse=[{1: FULL}])
    with pytest.raises(KafkaException, match="a later record taken, an earlier not"):
        send_many(producer, "t", values(4), partition=0)  # type: ignore[arg-type]


def test_a_refusal_other_than_a_full_queue_raises_it() -> None:
    producer = QueueProducer(room=10, refuse=[{2: KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)}])
    with pytest.raises(KafkaException) as raised:
        send_many(producer, "t", values(4), partition=0)  # type: ignore[arg-type]
    assert raised.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert producer.polls == 0
