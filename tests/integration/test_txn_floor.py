"""The transaction-floor benchmark against the real broker: every timed round of both
producers is tallied, every transaction is committed (a read_committed reader sees all the
records), and the topics a run makes for itself are gone afterwards."""

from __future__ import annotations

from collections.abc import Callable

from bench import txn_floor
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from txstream.kafka.admin import TopicAdmin


def test_both_producers_are_timed_and_every_transaction_committed(
    kafka: KafkaEnv, new_topic: Callable[..., str]
) -> None:
    names = [new_topic("floor"), new_topic("floor")]
    results = txn_floor.measure_on(kafka.settings, names, rounds=4, records=3)
    assert set(results) == {"plain flush", "transaction flush", "transaction commit"}
    assert all(s.n == 4 and 0 < s.p50 <= s.max for s in results.values())
    sent = 2 * 3 * (txn_floor.WARMUP + 4)  # both producers, every round, warm-up included
    assert [len(read_to_end(kafka.settings, n)) for n in names] == [sent, sent]


def test_a_run_removes_the_topics_it_made(kafka: KafkaEnv) -> None:
    admin = TopicAdmin(kafka.settings)
    results = txn_floor.measure(kafka.settings, rounds=1, topics=1, records=1)
    assert results["transaction commit"].n == 1
    assert not [t for t in admin.list_topics() if t.startswith("txn-floor-")]
