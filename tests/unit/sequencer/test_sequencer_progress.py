"""The progress a keyed route may announce: every batch up to it emitted everywhere."""

from __future__ import annotations

from typing import Any

from tests.unit.sequencer.test_sequencer_lanes import ev, lane
from txstream.sequencer_config import Route
from txstream_sequencer.lanes import Output
from txstream_sequencer.runtime import _Route

BASE: dict[str, Any] = {"topic": "raw", "app": "a", "stream": "s", "schema": "leaderboard.Vote"}


def route() -> _Route:
    config = Route.model_validate({**BASE, "batch_id_field": "b", "progress": True})
    r = _Route(config, reader=None, codec=None, partitions=2)  # type: ignore[arg-type]
    r.lanes = {0: lane(seal_after_ms=100), 1: lane(seal_after_ms=100)}
    return r


def test_progress_stops_below_the_lowest_batch_any_lane_holds() -> None:
    r = route()
    assert r.progress_mark() is None  # nothing seen
    out = Output()
    r.lanes[0].add(ev(0, 1), 0, out)
    r.lanes[1].add(ev(1, 1), 0, out)
    r.lanes[0].add(ev(2, 2), 0, out)  # seals lane 0's part of 1; batch 2 open there
    r.lanes[0].release(out)
    assert r.progress_mark() == 0  # lane 1's part of batch 1 is still open: 1 may grow there
    r.lanes[1].add(ev(3, 3), 0, out)  # seals lane 1's part of 1; 3 opens
    r.lanes[1].release(out)
    assert r.progress_mark() == 1  # 2 is open on lane 0
    for lane_ in r.lanes.values():
        lane_.tick(100, out)
        lane_.release(out)
    assert r.progress_mark() == 3  # nothing held: every batch seen is out
