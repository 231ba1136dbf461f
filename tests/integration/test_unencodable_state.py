"""A state write the changelog cannot take costs one restart, not a crash loop.

A row that does not match its table's schema, or a window state over Kafka's record limit,
is found only by the group commit, before its transaction begins. That engine fails (in a
worker, the process exits and is restarted); the next one checks its TEs' records until it
is past that group, so the TE that made the write aborts with a dead letter and every other
batch commits. Before, the restarted engine failed on the same write again, forever.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.integration.test_oversize_output import aborts, produce
from tests.support.kafka_env import KafkaEnv
from tests.support.leaderboard_driver import drive
from txstream import App, Record, TxnContext
from txstream.commit.group_commit import UnencodableState
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.runtime.task import PartitionTask

BAD = 3  # the batch whose TE makes the unencodable write
LAST = 5
BIG = 600_000  # characters: two such tuples make a window state past Kafka's 1 MB


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


def writing_app(settings: Settings, write: Callable[[TxnContext], None]) -> App:
    """One procedure on `items` that records each batch id, and on batch `BAD` also runs
    `write`; a window of two big-enough tuples."""
    app = App(f"unenc-{uuid.uuid4().hex[:8]}")
    app.stream("items", schema="chain.Item")
    app.table("named", schema="leaderboard.Contestant")
    app.window("recent", schema="leaderboard.Contestant", rows=2, slide=1)

    @app.procedure(input="items", windows=["recent"])
    def name(ctx: TxnContext, batch: Sequence[Record]) -> None:
        row = {"contestant_number": ctx.batch_id, "contestant_name": "n", "num_votes": 0}
        ctx.table("named").put(ctx.batch_id, row)
        if ctx.batch_id == BAD:
            write(ctx)

    ensure_topics(TopicAdmin(settings), AppTopics(app.name), ["items"], partitions=1)
    return app


def not_its_schema(ctx: TxnContext) -> None:
    ctx.table("named").put(0, {"contestant_number": "zero", "contestant_name": "z"})


def window_too_large(ctx: TxnContext) -> None:
    for n in (1, 2):
        big = {"contestant_number": n, "contestant_name": "w" * BIG, "num_votes": 0}
        ctx.window("recent").insert(big)


@pytest.mark.parametrize(
    ("write", "reason"),
    [(not_its_schema, "invalid_row"), (window_too_large, "output_too_large")],
)
def test_an_unencodable_write_aborts_its_te_after_one_restart(
    settings: Settings, write: Callable[[TxnContext], None], reason: str
) -> None:
    app = writing_app(settings, write)
    produce(settings, app, range(1, LAST + 1))

    first = PartitionTask(app, 0, settings)
    with pytest.raises(UnencodableState):
        drive(first, until_batch=LAST, timeout_s=60, stream="items")
    first.close()

    restarted = PartitionTask(app, 0, settings)
    assert drive(restarted, until_batch=LAST, timeout_s=60, stream="items") == LAST
    assert restarted.checked.until is None, "past the failed group: the marker is dropped"
    named = restarted.tables()["named"]
    restarted.close()

    dead = aborts(settings, app)
    assert [(a["procedure"], a["batch_id"], a["reason"]) for a in dead] == [("name", BAD, reason)]
    assert sorted(named) == [(b,) for b in range(1, LAST + 1) if b != BAD]

    again = PartitionTask(app, 0, settings)
    again.open()
    assert not again.checked.record_check.checked, "the marker is gone"
    again.close()
