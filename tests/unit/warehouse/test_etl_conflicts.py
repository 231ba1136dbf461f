"""Commits refused by a concurrent one are made again: the retry itself, and `etl maintain`'s
compaction beside a running ETL's merges (Spark's conflict exceptions, raised by a fake
table: the merge that causes them is delta-rs', tested with real tables in
test_driver_writes.py)."""

from __future__ import annotations

from typing import Any

import pytest
from delta.exceptions import ConcurrentDeleteReadException

from txstream_etl import conflicts
from txstream_etl.maintenance import compact


class Compaction:
    """`DeltaTable.optimize().executeCompaction()` refused `refusals` times, then made."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.attempts = 0

    def optimize(self) -> Compaction:
        return self

    def executeCompaction(self) -> Compaction:
        self.attempts += 1
        if self.attempts <= self.refusals:
            raise ConcurrentDeleteReadException(message="a concurrent merge removed a file")
        return self

    def collect(self) -> list[dict[str, Any]]:
        return [{"metrics": {"numFilesRemoved": 7}}]


@pytest.fixture(autouse=True)
def three_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conflicts, "ATTEMPTS", 3)


def test_a_compaction_refused_by_a_concurrent_merge_is_made_again() -> None:
    table = Compaction(refusals=2)
    assert compact(table, "stats") == 7  # type: ignore[arg-type]
    assert table.attempts == 3


def test_a_compaction_refused_every_time_raises_the_refusal() -> None:
    table = Compaction(refusals=3)
    with pytest.raises(ConcurrentDeleteReadException):
        compact(table, "stats")  # type: ignore[arg-type]
    assert table.attempts == 3
