"""Border batches whose id does not increase, produced straight to the input topic.

An exact re-send is skipped and counted; a different batch under a used id is dead-lettered
on the app's aborts topic with its reason, and the next good batch is processed. The
digest that tells them apart commits with the position, so a restart that rebuilds RocksDB
from the changelog still tells them apart.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import REGISTRY

from chain.dataflow import build_app
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.leaderboard_driver import drive
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import common_config
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.model.app import App
from txstream.runtime.task import PartitionTask
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


def new_chain(settings: Settings) -> App:
    app = build_app(1, name=f"stale-{uuid.uuid4().hex[:8]}")
    ensure_topics(TopicAdmin(settings), AppTopics(app.name), ["s0"], partitions=1)
    return app


def produce(settings: Settings, app: App, batches: list[tuple[int, int]]) -> None:
    """(batch id, value) batches of one tuple each, straight to the border topic."""
    registry = SchemaRegistry(settings.schema_dir)
    codec = BatchCodec(registry.get("chain.Item"))
    producer = Producer(common_config(settings))
    for batch_id, value in batches:
        record = codec.encode("s0", batch_id, [{"key": 1, "value": value}])
        producer.produce(AppTopics(app.name).stream("s0"), record, partition=0)
    assert producer.flush(30) == 0


def aborts(settings: Settings, app: App) -> list[dict[str, Any]]:
    schema = SchemaRegistry(settings.schema_dir).get("txstream.AbortRecord")
    return [decode_record(schema, v) for _, v in read_to_end(settings, AppTopics(app.name).aborts)]


def stale_count(app: App, outcome: str) -> float:
    labels = {"app": app.name, "stream": "s0", "outcome": outcome}
    return REGISTRY.get_sample_value("txstream_stale_batches_total", labels) or 0.0


def test_a_stale_batch_is_dead_lettered_and_the_next_one_processed(settings: Settings) -> None:
    app = new_chain(settings)
    # 2 again, byte for byte (a re-send); then 2 and 1 with other content (conflicts)
    produce(settings, app, [(1, 1), (2, 2), (2, 2), (2, 50), (1, 60), (3, 3)])
    task = PartitionTask(app, 0, settings)
    assert drive(task, until_batch=3, timeout_s=60, stream="s0") == 3
    assert task.tables()["totals"][(0, 1)] == {"value": 6, "batches": 3}
    task.close()

    dead = [
        (a["procedure"], a["stream"], a["batch_id"], a["reason"]) for a in aborts(settings, app)
    ]
    assert dead == [("<input>", "s0", 2, "stale_batch_id"), ("<input>", "s0", 1, "stale_batch_id")]
    error = aborts(settings, app)[0]["error"]
    for part in ("batch id 2", "stream 's0'", "partition 0", "last batch id 2", "differs"):
        assert part in error, error
    assert stale_count(app, "dead_letter") == 2
    assert stale_count(app, "resend") == 1

    # rebuilt from the changelog, the engine still knows batch 3's content
    shutil.rmtree(task.state_dir)
    produce(settings, app, [(3, 3), (3, 70), (4, 4)])
    restarted = PartitionTask(app, 0, settings)
    assert drive(restarted, until_batch=4, timeout_s=60, stream="s0") == 4
    assert restarted.tables()["totals"][(0, 1)] == {"value": 10, "batches": 4}
    restarted.close()
    assert [a["batch_id"] for a in aborts(settings, app)] == [2, 1, 3]
    assert stale_count(app, "dead_letter") == 3
    assert stale_count(app, "resend") == 2
