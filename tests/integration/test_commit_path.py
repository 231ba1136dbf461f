"""The exactly-once commit path against the real broker: PartitionTask + changelog + RocksDB."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from leaderboard.dataflow import Params
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv, private_settings
from tests.support.kafka_reads import read_to_end
from tests.support.leaderboard_driver import drive, load_inputs, new_app
from tests.support.reference.leaderboard_ref import run_reference
from txstream.commit.group_commit import CommitError
from txstream.config import Settings
from txstream.runtime.task import PartitionTask
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry

PARAMS = Params(contestants=12, threshold=1000, window=100, slide=1)


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


def reference(votes: Path) -> dict[str, object]:
    return run_reference(votes, contestants=12, threshold=1000, window=100, slide=1)


def read_batch_ids(settings: Settings, topic: str, codec: BatchCodec) -> list[int]:
    return [codec.decode(value).batch_id for _, value in read_to_end(settings, topic)]


def test_leaderboard_commits_exactly_once_and_survives_lost_state(
    settings: Settings, tmp_path: Path
) -> None:
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 3000, contestants=12, seed=7)
    app = new_app(PARAMS)
    last = load_inputs(settings, app, votes, batch_size=1)

    task = PartitionTask(app, 0, settings)
    assert drive(task, last) == last
    got = result_document(task.tables())
    task.close()
    assert got == {k: reference(votes)[k] for k in got}

    # every committed output batch appears once on its stream
    registry = SchemaRegistry(settings.schema_dir)
    accepted = read_batch_ids(
        settings, f"{app.name}.accepted_votes", BatchCodec(registry.get("leaderboard.AcceptedVote"))
    )
    assert len(accepted) == len(set(accepted)) == last

    # RocksDB is only a cache: delete it and the changelog rebuilds the same state
    shutil.rmtree(task.state_dir)
    rebuilt = PartitionTask(app, 0, settings)
    rebuilt.open()
    assert result_document(rebuilt.tables()) == got
    rebuilt.close()


def test_restart_resumes_at_committed_position_and_fences_the_zombie(
    settings: Settings, tmp_path: Path
) -> None:
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 2000, contestants=12, seed=8)
    app = new_app(PARAMS)
    last = load_inputs(settings, app, votes, batch_size=1)

    zombie = PartitionTask(app, 0, settings)
    drive(zombie, until_batch=500)
    # a second incarnation on its own state dir takes over the same partition
    successor_settings = settings.model_copy(update={"home": tmp_path / "home2"})
    successor = PartitionTask(app, 0, successor_settings)
    assert drive(successor, last) == last

    # the zombie's next commit is fenced: it can no longer write anything
    zombie.engine.process("votes", last + 1, [])
    with pytest.raises(CommitError):
        zombie.commit()

    got = result_document(successor.tables())
    assert got == {k: reference(votes)[k] for k in got}
    registry = SchemaRegistry(settings.schema_dir)
    accepted = read_batch_ids(
        settings, f"{app.name}.accepted_votes", BatchCodec(registry.get("leaderboard.AcceptedVote"))
    )
    assert sorted(accepted) == list(range(1, last + 1))
    for t in (zombie, successor):
        t.partition_state.close()


def test_private_settings_helper_is_isolated(tmp_path: Path) -> None:
    s = private_settings(tmp_path)
    assert s.home == tmp_path and s.kafka_port != 9092
