"""Sealing and ordering rules of one sequencer lane, with no Kafka."""

from __future__ import annotations

from txstream_sequencer.events import Event
from txstream_sequencer.lanes import Lane, LaneState, Limits, Output, Reason

TOPIC = "raw"


def ev(offset: int, batch_id: int | None, payload: bytes | None = None) -> Event:
    body = payload if payload is not None else f"e{offset}".encode()
    return Event((TOPIC, 0, offset), None, body, {"n": offset}, batch_id, 0)


def feed(lane: Lane, events: list[Event], now_ms: float = 0.0) -> Output:
    out = Output()
    for e in events:
        lane.add(e, now_ms, out)
    lane.release(out)
    return out


def lane(policy: bool = False, **limits: int) -> Lane:
    return Lane("votes[0]", Limits(**limits), LaneState(), policy)


def test_a_higher_id_seals_the_open_batch_and_idle_time_seals_the_last() -> None:
    lane_ = lane(seal_after_ms=100)
    out = feed(lane_, [ev(0, 1), ev(1, 1), ev(2, 2)])
    assert [(b.batch_id, len(b.events)) for b in out.sealed] == [(1, 2)]
    out = Output()
    lane_.tick(50, out)
    assert out.sealed == [] and lane_.open is not None
    lane_.tick(100, out)
    lane_.release(out)
    assert [b.batch_id for b in out.sealed] == [2]


def test_an_exact_resend_is_dropped_and_a_different_one_is_late() -> None:
    lane_ = lane()
    feed(lane_, [ev(0, 1), ev(1, 2), ev(2, 3)])
    out = feed(lane_, [ev(3, 2, payload=b"e1"), ev(4, 4)])  # batch 2 again, byte for byte
    assert [d.batch_id for d in out.duplicates] == [2] and out.dead == []
    out = feed(lane_, [ev(5, 2, payload=b"changed"), ev(6, 5)])
    assert [(d.reason, d.event.position[2]) for d in out.dead] == [(Reason.LATE, 5)]


def test_an_id_below_the_open_batch_is_out_of_order() -> None:
    lane_ = lane()
    out = feed(lane_, [ev(0, 1), ev(1, 3), ev(2, 2)])
    assert [d.reason for d in out.dead] == [Reason.OUT_OF_ORDER]
    assert "after batch 3" in out.dead[0].error


def test_an_oversized_batch_is_dead_lettered_whole_including_its_stragglers() -> None:
    lane_ = lane(max_events=2)
    out = feed(lane_, [ev(0, 1), ev(1, 1), ev(2, 1), ev(3, 1), ev(4, 2), ev(5, 3)])
    assert [d.event.position[2] for d in out.dead] == [0, 1, 2, 3]
    assert {d.reason for d in out.dead} == {Reason.OVERSIZED}
    assert [b.batch_id for b in out.sealed] == [2]


def test_the_policy_numbers_batches_by_count() -> None:
    lane_ = lane(policy=True, policy_events=2)
    out = feed(lane_, [ev(i, None) for i in range(5)])
    assert [(b.batch_id, len(b.events)) for b in out.sealed] == [(1, 2), (2, 2)]


def test_re_read_events_already_handled_are_skipped_after_a_crash() -> None:
    """The input is re-read from the lowest offset any lane held; handled ones are skipped."""
    lane_ = lane(policy=True, policy_events=2)
    feed(lane_, [ev(0, None), ev(1, None), ev(2, None)])  # batch 1 = 0,1; 2 is still open
    lane_.state.compact(lane_.pending_floor())
    assert lane_.state.through[(TOPIC, 0)] == 2
    restarted = Lane("votes[0]", Limits(policy_events=2), lane_.state, policy=True)
    out = feed(restarted, [ev(0, None), ev(1, None), ev(2, None), ev(3, None)])
    assert [(b.batch_id, [e.position[2] for e in b.events]) for b in out.sealed] == [(2, [2, 3])]


def test_the_gate_holds_a_batch_until_the_previous_one_is_committed() -> None:
    lane_ = lane()
    out = Output()
    for e in [ev(0, 1), ev(1, 2), ev(2, 3)]:
        lane_.add(e, 0, out)
    lane_.release(out, gate=None, gated=True)
    assert [b.batch_id for b in out.sealed] == [1]  # nothing emitted yet: the first may go
    lane_.release(out, gate=None, gated=True)
    assert [b.batch_id for b in out.sealed] == [1]
    lane_.release(out, gate=1, gated=True)
    assert [b.batch_id for b in out.sealed] == [1, 2]


def test_a_lane_names_the_lowest_batch_it_has_not_emitted() -> None:
    lane_ = lane(seal_after_ms=100)
    assert lane_.unreleased() is None
    out = Output()
    for e in [ev(0, 3), ev(1, 4)]:
        lane_.add(e, 0, out)
    assert lane_.unreleased() == 3  # 3 sealed and queued, 4 open
    lane_.release(out)
    assert lane_.unreleased() == 4
    lane_.tick(100, out)
    lane_.release(out)
    assert lane_.unreleased() is None and lane_.state.last == 4
