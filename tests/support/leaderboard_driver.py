"""Test helpers: run the leaderboard app on an in-process PartitionTask over the real broker."""

from __future__ import annotations

import uuid
from pathlib import Path

from leaderboard.dataflow import Params, build_app
from leaderboard.loader import Loader
from txstream.commit.pipeline import CommitSummary
from txstream.config import Settings
from txstream.model.app import App
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask


def new_app(params: Params) -> App:
    return build_app(params, name=f"lb-{uuid.uuid4().hex[:8]}")


def load_inputs(settings: Settings, app: App, votes: Path, batch_size: int) -> int:
    """Create the app's topics and produce reference rows and vote batches; returns last id."""
    loader = Loader(settings, app)
    loader.load_reference_data()
    return loader.load_votes(votes, batch_size)


def drive(
    task: PartitionTask, until_batch: int, timeout_s: float = 120, stream: str = "votes"
) -> int:
    """Open the task and feed it until `until_batch` of `stream` is committed."""
    return feed(task, task.open(), until_batch, timeout_s, stream)


def feed(
    task: PartitionTask, positions: dict[str, int], until_batch: int, timeout_s: float, stream: str
) -> int:
    """Feed an opened task from `positions` until `until_batch` of `stream` is committed."""
    pump = TaskPump(task, positions)
    done = task.engine.sys_value(("batch", stream, 0)) or 0
    if done >= until_batch:
        pump.close()
        return done

    def reached(info: CommitSummary) -> bool:
        nonlocal done
        done = max(done, info.last.get(stream, 0))
        return done >= until_batch

    try:
        pump.run_until(reached, timeout_s)
    finally:
        pump.close()
    return done
