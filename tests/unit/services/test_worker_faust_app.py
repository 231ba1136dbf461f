"""The worker's Faust app, without a broker: its seat in the inputs' consumer group.

Faust subscribes the worker to the app's inputs without agents, assigns their partitions
with its co-partitioning assignor, commits no consumer-group offset, and ends the process
if a record of an input ever reaches it (docs/worker-faust.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn, cast

import pytest

from leaderboard.dataflow import Params, build_app
from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.model.app import App
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.inputs import Inputs
from txstream_worker import agents
from txstream_worker.agents import TxFaustApp, UnreadInput, faust_app
from txstream_worker.transport import Consumer, Transport

PARAMS = Params(contestants=12, threshold=1000, window=100, slide=1)


def worker_app(tmp_path: Path) -> tuple[App, TxFaustApp]:
    app = build_app(PARAMS, name="lb-faust")
    settings = Settings(home=tmp_path)
    return app, faust_app(app, settings, CommitPolicy(), RecoveryPolicy(), "host-0")


def test_the_inputs_are_subscribed_without_agents(tmp_path: Path) -> None:
    app, fapp = worker_app(tmp_path)
    assert not list(fapp.agents)
    assert all(isinstance(topic.schema, UnreadInput) for topic in fapp.topics)
    assert {name for topic in fapp.topics for name in topic.topics} == set(Inputs.of(app).topics)
    assert isinstance(fapp.transport, Transport)


def test_faust_keeps_its_co_partitioning_assignor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, fapp = worker_app(tmp_path)
    assert fapp.conf.table_standby_replicas >= 1
    monkeypatch.setenv("TABLE_STANDBY_REPLICAS", "0")  # Faust prefers it to the argument
    with pytest.raises(ValueError, match="TABLE_STANDBY_REPLICAS must be at least 1"):
        worker_app(tmp_path)


def test_faust_commits_no_group_offset(tmp_path: Path) -> None:
    _, fapp = worker_app(tmp_path)
    consumer = fapp.consumer
    assert isinstance(consumer, Consumer)
    assert asyncio.run(consumer.commit()) is False


class Exited(Exception):
    pass


def test_a_record_reaching_faust_ends_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exit_(why: str) -> NoReturn:
        raise Exited(why)

    monkeypatch.setattr(agents, "fail", exit_)
    _, fapp = worker_app(tmp_path)
    topic = next(iter(fapp.topics))
    record = cast(Any, SimpleNamespace(topic=topic.topics[0]))
    with pytest.raises(Exited, match=f"a record of {topic.topics[0]} reached Faust"):
        asyncio.run(topic.decode(record))
