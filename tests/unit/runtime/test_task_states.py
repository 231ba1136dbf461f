"""A partition task's states: created -> restoring -> running -> closed, and no other way.

The broker is faked here (only the transitions are under test); the task's real life,
against a broker, is in tests/integration (test_commit_path, test_recovery_modes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests.support.simulation.app import build_app
from txstream.config import Settings
from txstream.runtime.partition_state import PartitionState
from txstream.runtime.task import PartitionTask, TaskState
from txstream.state.store import StateStoreError


class _Producer:
    """Takes the calls a task makes before its store opens, and counts the flushes."""

    flushed = 0

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf

    def init_transactions(self, timeout_s: float) -> None:
        pass

    def flush(self, timeout_s: float) -> int:
        _Producer.flushed += 1
        return 0


def task(tmp_path: Path) -> PartitionTask:
    return PartitionTask(build_app(nested=False), 0, Settings(home=tmp_path))


def test_a_task_not_opened_closes_and_then_refuses_to_open(tmp_path: Path) -> None:
    t = task(tmp_path)
    assert t.status is TaskState.CREATED
    t.close()
    assert t.status.value == "closed"
    with pytest.raises(RuntimeError, match="cannot go from closed to restoring"):
        t.open()


def test_a_failed_open_closes_what_it_opened_and_keeps_its_error(tmp_path: Path) -> None:
    t = task(tmp_path)
    _Producer.flushed = 0
    damaged = StateStoreError(tmp_path, "the disk is gone")
    with (
        mock.patch("txstream.runtime.task.Producer", _Producer),
        mock.patch.object(PartitionState, "open", side_effect=damaged),
        pytest.raises(StateStoreError, match="the disk is gone"),
    ):
        t.open()
    assert t.status is TaskState.CLOSED
    assert _Producer.flushed == 1, "the producer opened before the failure is flushed"
    t.close()  # closing again changes nothing, and raises nothing
    assert _Producer.flushed == 1
    with pytest.raises(RuntimeError, match="cannot go from closed to restoring"):
        t.open()
