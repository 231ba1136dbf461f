"""A pump waiting for its group to come due waits in librdkafka, not in a loop of polls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv
from tests.support.leaderboard_driver import load_inputs, new_app
from txstream.config import Settings
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


class TimedPolls:
    """The pump's consumer, each poll's timeout, wait and outcome noted."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.polls: list[tuple[float, float, bool]] = []  # timeout, waited, got a record

    def poll(self, timeout: float) -> Any:
        started = time.monotonic()
        msg = self.consumer.poll(timeout)
        self.polls.append((timeout, time.monotonic() - started, msg is not None))
        return msg

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


def test_polls_that_should_wait_do_wait(settings: Settings, tmp_path: Path) -> None:
    """Ten batches taken one a step: the last group waits out its 10 ms interval, and a
    commit in flight is looked back at every 1 ms. A poll asked to wait under 1 ms used to
    return at once (librdkafka takes whole ms and the client truncates), so the pump spun
    until its group came due."""
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 20, contestants=5, seed=4)
    app = new_app(Params(contestants=5, threshold=1000))
    last = load_inputs(settings, app, votes, batch_size=2)
    task = PartitionTask(app, 0, settings)
    pump = TaskPump(task, task.open())
    timed = TimedPolls(pump.consumer)
    pump.consumer = timed  # type: ignore[assignment]  # a stand-in that notes each poll
    committed = 0
    try:
        deadline = time.monotonic() + 60
        while committed < last:
            assert time.monotonic() < deadline, f"{committed}/{last} batches committed"
            for info in pump.step(max_records=1):
                committed = max(committed, info.last.get("votes", 0))
    finally:
        pump.close()
        task.close()
    waits = [p for p in timed.polls if p[0] > 0 and not p[2]]
    assert waits, "the group never waited for its interval"
    spun = [p for p in waits if p[1] < 0.0005]
    assert not spun, f"{len(spun)} of {len(waits)} polls asked to wait returned at once: {spun[:5]}"
