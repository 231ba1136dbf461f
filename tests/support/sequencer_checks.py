"""What every sequencer fault run must show once its events are sent: all of them sealed,
each exactly once, in order and with rising batch ids on each border partition."""

from __future__ import annotations

from typing import Any

from tests.support.sequencer_driver import (
    batches_by_partition,
    read_batches,
    read_dead_letters,
    wait_until,
)
from txstream.config import Settings
from txstream.stack.supervisor import Supervised

SCHEMA = "leaderboard.Vote"


def wait_all_sealed(
    settings: Settings, app: str, sequencer: Supervised, sent: list[dict[str, Any]]
) -> None:
    def sealed() -> int:
        return sum(len(b.tuples) for b in read_batches(settings, app, "votes", SCHEMA))

    alive = lambda: sequencer.supervisor.live_pid() is not None  # noqa: E731
    wait_until(lambda: sealed() >= len(sent), 180, alive, "every event sealed")


def check_exactly_once(
    settings: Settings, app: str, name: str, sent: int, lanes: int, per_batch: int | None
) -> None:
    """`per_batch`: events carried client batch ids, `per_batch` events each (vote_id //
    per_batch + 1); None: the sequencer numbered the batches 1, 2, 3, ... per partition."""
    got: list[int] = []
    by_partition = batches_by_partition(settings, app, "votes", SCHEMA)
    assert len(by_partition) == lanes
    for partition, batches in by_partition.items():
        batch_ids = [b.batch_id for b in batches]
        assert batch_ids == sorted(set(batch_ids)), f"batch ids rise on partition {partition}"
        in_lane = [t["vote_id"] for b in batches for t in b.tuples]
        assert in_lane == sorted(in_lane), f"events keep their order on partition {partition}"
        got += in_lane
        if per_batch is None:
            assert batch_ids == list(range(1, len(batches) + 1)), "numbered 1, 2, 3, ..."
        else:
            for batch in batches:
                own = {t["vote_id"] // per_batch + 1 for t in batch.tuples}
                assert own == {batch.batch_id}, "a sealed batch holds exactly its own events"
    assert sorted(got) == list(range(sent)), "every event exactly once"
    assert read_dead_letters(settings, f"txstream-sequencer-{name}.dead_letters") == []
