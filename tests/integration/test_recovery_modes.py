"""Each recovery mode on the real broker: after lost state, recovery rebuilds exactly the
state the engine had before the crash; and going on from there stays exactly-once.

The crash loses the whole RocksDB directory (as S-Store loses main memory), so recovery
starts from the newest snapshot and replays the changelog or the command log after it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from chain.dataflow import build_app as build_chain
from chain.load import load_batches
from leaderboard.dataflow import Params
from leaderboard.dataflow import build_app as build_leaderboard
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.leaderboard_driver import drive, feed, load_inputs
from tests.support.reference.chain_ref import chain_totals
from tests.support.reference.leaderboard_ref import run_reference
from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.model.app import App
from txstream.model.declarations import RecoveryMode
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.task import PartitionTask
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry

MODES = [RecoveryMode.CHANGELOG, RecoveryMode.STRONG, RecoveryMode.WEAK]
LENGTH, SIZE, SEED, ABORT_EVERY = 4, 3, 3, 7


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


def task_for(app: App, settings: Settings, mode: RecoveryMode, gc: bool = True) -> PartitionTask:
    policy = RecoveryPolicy(mode, snapshot_every_batches=400, snapshot_interval_s=0)
    commit = CommitPolicy(interval_ms=20, max_batches=50) if gc else CommitPolicy.off()
    return PartitionTask(app, 0, settings, commit, policy)


def crash(task: PartitionTask) -> None:
    """Lose the engine's RocksDB entirely; the snapshots and Kafka survive."""
    task.partition_state.close()
    shutil.rmtree(task.state_dir)


def batch_ids(settings: Settings, app: App, stream: str) -> list[int]:
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("chain.Item"))
    return [codec.decode(v).batch_id for _, v in read_to_end(settings, f"{app.name}.{stream}")]


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_chain_state_after_recovery_equals_state_before_crash(
    settings: Settings, mode: RecoveryMode
) -> None:
    app = build_chain(LENGTH, name=f"chain-{mode}-{id(settings)}", recovery=mode,
                      abort_every=ABORT_EVERY)  # fmt: skip
    load_batches(settings, app, 1000, SIZE, SEED)
    first = task_for(app, settings, mode, gc=mode is not RecoveryMode.WEAK)
    assert drive(first, 1000, stream="s0") == 1000
    before = first.tables()
    crash(first)

    second = task_for(app, settings, mode)
    positions = second.open()
    assert second.tables() == before
    assert second.partition_state.snapshots.newest_first(), "snapshots were taken"
    assert second.recovered_records > 0, "recovery replayed log records after the snapshot"
    if mode.logged:
        start = TopicAdmin(settings).start_offset(f"{app.name}.cmdlog", 0)
        assert start > 0, "the command log is truncated after a snapshot"

    load_batches(settings, app, 500, SIZE, SEED, first=1001)
    assert feed(second, positions, 1500, 120, "s0") == 1500
    totals = {k: v for k, v in second.tables()["totals"].items()}
    expected = chain_totals(LENGTH, 1500, SIZE, SEED, ABORT_EVERY)
    assert {(k[0], k[1]): v for k, v in totals.items()} == expected
    assert sorted(batch_ids(settings, app, "s1")) == list(range(1, 1501)), "exactly once"
    survivors = [b for b in range(1, 1501) if b % ABORT_EVERY]
    assert sorted(batch_ids(settings, app, "s3")) == survivors, "exactly once past the aborts"
    second.close()


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_leaderboard_state_after_recovery_equals_state_before_crash(
    settings: Settings, mode: RecoveryMode, tmp_path: Path
) -> None:
    """Nested transactions, windows and EE triggers, through each mode."""
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 1500, contestants=12, seed=4)
    params: dict[str, Any] = {"contestants": 12, "threshold": 300, "window": 50, "slide": 5}
    app = build_leaderboard(Params(**params), name=f"lb-{mode}-{id(settings)}", recovery=mode)
    last = load_inputs(settings, app, votes, batch_size=1)
    first = task_for(app, settings, mode)
    assert drive(first, last) == last
    before = first.tables()
    crash(first)

    second = task_for(app, settings, mode)
    second.open()
    assert second.tables() == before
    assert second.recovered_records > 0, "recovery replayed log records after the snapshot"
    expected = run_reference(votes, **params)
    got = result_document(second.tables())
    assert {k: got[k] for k in expected} == expected
    second.close()
