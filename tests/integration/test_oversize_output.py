"""An output or a state write larger than Kafka takes aborts its TE; the task goes on.

Before, such a record reached the group commit, which failed (MSG_SIZE_TOO_LARGE), and the
restarted worker failed on the same batch again: a crash loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.leaderboard_driver import drive
from txstream import App, Record, TxnContext
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import common_config
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.runtime.task import PartitionTask
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry

HUGE = 2_000_000  # characters: past the 1 MB Kafka takes by default
BIG_OUTPUT, BIG_ROW = 2, 3  # the batches that make too large a record


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


def big_app(settings: Settings) -> App:
    """names: batch `BIG_OUTPUT` emits a huge name, batch `BIG_ROW` stores one."""
    app = App(f"big-{uuid.uuid4().hex[:8]}")
    app.stream("items", schema="chain.Item")
    app.stream("names", schema="leaderboard.Contestant")
    app.table("named", schema="leaderboard.Contestant")

    @app.procedure(input="items", outputs=["names"])
    def name(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for t in batch:
            text = "x" * HUGE if ctx.batch_id == BIG_OUTPUT else f"n{t['value']}"
            row = {"contestant_number": ctx.batch_id, "contestant_name": text, "num_votes": 0}
            ctx.emit("names", row)
            if ctx.batch_id == BIG_ROW:
                row = {**row, "contestant_name": "y" * HUGE}
            ctx.table("named").put(ctx.batch_id, row)

    ensure_topics(TopicAdmin(settings), AppTopics(app.name), ["items", "names"], partitions=1)
    return app


def produce(settings: Settings, app: App, batch_ids: range) -> None:
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("chain.Item"))
    producer = Producer(common_config(settings))
    for b in batch_ids:
        record = codec.encode("items", b, [{"key": 1, "value": b}])
        producer.produce(AppTopics(app.name).stream("items"), record, partition=0)
    assert producer.flush(30) == 0


def aborts(settings: Settings, app: App) -> list[dict[str, Any]]:
    schema = SchemaRegistry(settings.schema_dir).get("txstream.AbortRecord")
    return [decode_record(schema, v) for _, v in read_to_end(settings, AppTopics(app.name).aborts)]


def test_too_large_a_record_aborts_its_te_and_the_next_batch_commits(settings: Settings) -> None:
    app = big_app(settings)
    produce(settings, app, range(1, 5))
    task = PartitionTask(app, 0, settings)
    assert drive(task, until_batch=4, timeout_s=60, stream="items") == 4
    named = task.tables()["named"]
    task.close()

    topics = AppTopics(app.name)
    dead = aborts(settings, app)
    assert [(a["procedure"], a["batch_id"], a["reason"]) for a in dead] == [
        ("name", BIG_OUTPUT, "output_too_large"),
        ("name", BIG_ROW, "output_too_large"),
    ]
    limit = settings.kafka_max_record_bytes
    assert dead[0]["error"].startswith(f"output_too_large: {topics.stream('names')} ")
    assert dead[1]["error"].startswith(f"output_too_large: {topics.changelog} ")
    for a in dead:
        assert a["error"].endswith(f" > {limit}"), a["error"]
        assert int(a["error"].split()[-3]) > limit

    # the aborted TEs left nothing; the batches around them committed
    assert sorted(named) == [(1,), (4,)]
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("leaderboard.Contestant"))
    outputs = [codec.decode(v) for _, v in read_to_end(settings, topics.stream("names"))]
    assert [(b.batch_id, b.tuples[0]["contestant_name"]) for b in outputs] == [(1, "n1"), (4, "n4")]
