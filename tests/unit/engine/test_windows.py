"""Window sliding semantics, hand-computed, and the properties the engine relies on."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from txstream.engine.windows import (
    WindowError,
    WindowState,
    empty_state,
    from_record,
    insert,
    staged,
    state_schema,
    to_record,
    visible,
)
from txstream.model.windows import TimeWindowSpec, TupleWindowSpec, WindowSpec


def ids(rows: tuple[dict[str, Any], ...]) -> list[int]:
    return [r["id"] for r in rows]


def ts_of(rows: tuple[dict[str, Any], ...]) -> list[int]:
    return [r["ts"] for r in rows]


def feed_ids(spec: WindowSpec, n: int) -> list[tuple[list[int], list[int], int]]:
    """(visible ids, staged ids, slides) after each of tuples 1..n."""
    state = empty_state(spec)
    steps = []
    for i in range(1, n + 1):
        state, slides = insert(spec, state, {"id": i})
        steps.append((ids(visible(state)), ids(staged(state)), slides))
    return steps


def feed_ts(spec: TimeWindowSpec, state: WindowState, *stamps: int) -> tuple[WindowState, int]:
    """Insert tuples with the given timestamps; returns the final state and total slides."""
    total = 0
    for t in stamps:
        state, slides = insert(spec, state, {"ts": t})
        total += slides
    return state, total


# --- tuple windows ---------------------------------------------------------------------------


def test_rows5_slide2_by_hand() -> None:
    assert feed_ids(TupleWindowSpec(rows=5, slide=2), 10) == [
        ([], [1], 0),
        ([1, 2], [], 1),
        ([1, 2], [3], 0),
        ([1, 2, 3, 4], [], 1),
        ([1, 2, 3, 4], [5], 0),
        ([2, 3, 4, 5, 6], [], 1),
        ([2, 3, 4, 5, 6], [7], 0),
        ([4, 5, 6, 7, 8], [], 1),
        ([4, 5, 6, 7, 8], [9], 0),
        ([6, 7, 8, 9, 10], [], 1),
    ]


def test_staged_tuples_are_invisible_until_the_slide() -> None:
    steps = feed_ids(TupleWindowSpec(rows=5, slide=3), 3)
    assert steps[0] == ([], [1], 0)
    assert steps[1] == ([], [1, 2], 0)
    assert steps[2] == ([1, 2, 3], [], 1)


def test_slide_1_makes_every_tuple_visible_at_once() -> None:
    assert feed_ids(TupleWindowSpec(rows=3, slide=1), 5) == [
        ([1], [], 1),
        ([1, 2], [], 1),
        ([1, 2, 3], [], 1),
        ([2, 3, 4], [], 1),
        ([3, 4, 5], [], 1),
    ]


def test_slide_equal_to_rows_is_tumbling() -> None:
    assert feed_ids(TupleWindowSpec(rows=3, slide=3), 7) == [
        ([], [1], 0),
        ([], [1, 2], 0),
        ([1, 2, 3], [], 1),
        ([1, 2, 3], [4], 0),
        ([1, 2, 3], [4, 5], 0),
        ([4, 5, 6], [], 1),
        ([4, 5, 6], [7], 0),
    ]


@pytest.mark.parametrize(("rows", "slide"), [(100, 10), (100, 1), (7, 3), (4, 4)])
def test_visible_is_last_rows_of_the_first_whole_slides(rows: int, slide: int) -> None:
    """The leaderboard's definition: the last W of the first floor(A/S)*S tuples."""
    for a, (vis, stg, _) in enumerate(feed_ids(TupleWindowSpec(rows, slide), 350), start=1):
        slid = a // slide * slide
        assert vis == list(range(max(1, slid - rows + 1), slid + 1))
        assert stg == list(range(slid + 1, a + 1))


# --- time windows ----------------------------------------------------------------------------

R10S5 = TimeWindowSpec(range=10, slide=5, time_field="ts")


def test_first_tuple_opens_its_period_without_sliding() -> None:
    state, slides = feed_ts(R10S5, empty_state(R10S5), 3, 4)
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == ([], [3, 4], 0, 0)


def test_time_window_by_hand() -> None:
    state, slides = feed_ts(R10S5, empty_state(R10S5), 3, 4)
    state, slides = insert(R10S5, state, {"ts": 5})  # exactly on boundary 5: slides
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == (
        [3, 4],
        [5],
        5,
        1,
    )
    state, slides = insert(R10S5, state, {"ts": 9})  # still before 10: staged
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == (
        [3, 4],
        [5, 9],
        5,
        0,
    )
    state, slides = insert(R10S5, state, {"ts": 12})  # window [0, 10)
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == (
        [3, 4, 5, 9],
        [12],
        10,
        1,
    )
    state, slides = insert(R10S5, state, {"ts": 17})  # window [5, 15): 3 and 4 evicted
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == (
        [5, 9, 12],
        [17],
        15,
        1,
    )


def test_interval_is_closed_at_the_start_and_open_at_the_end() -> None:
    state, _ = feed_ts(R10S5, empty_state(R10S5), 9, 10, 14)
    # boundary 10: [0, 10) holds 9; 10 is at the boundary, so still staged with 14
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary) == ([9], [10, 14], 10)
    state, slides = insert(R10S5, state, {"ts": 20})
    # boundary 20: [10, 20) keeps 10 (= 20 - 10) and evicts 9
    assert (ts_of(state.visible), ts_of(state.staged), slides) == ([10, 14], [20], 2)


def test_gap_crossing_several_boundaries_slides_once_per_boundary() -> None:
    state, _ = feed_ts(R10S5, empty_state(R10S5), 1, 6, 11, 13)
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary) == ([1, 6], [11, 13], 10)
    state, slides = insert(R10S5, state, {"ts": 23})
    # 15 and 20 crossed; [10, 20) keeps the staged 11, 13 and evicts 1, 6
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == (
        [11, 13],
        [23],
        20,
        2,
    )
    state, slides = insert(R10S5, state, {"ts": 1002})
    # 25 .. 1000 crossed: 196 boundaries; [990, 1000) is empty
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary, slides) == (
        [],
        [1002],
        1000,
        196,
    )


def test_a_gap_longer_than_the_range_evicts_staged_tuples_unseen() -> None:
    state, _ = feed_ts(R10S5, empty_state(R10S5), 2, 3)
    state, slides = insert(R10S5, state, {"ts": 17})
    # boundaries 5, 10, 15 crossed; [5, 15) no longer holds 2 or 3
    assert (ts_of(state.visible), ts_of(state.staged), slides) == ([], [17], 3)


def test_late_tuple_is_rejected_with_the_boundary_named() -> None:
    state, _ = feed_ts(R10S5, empty_state(R10S5), 3, 12)
    assert state.boundary == 10
    with pytest.raises(WindowError, match=r"ts=9 is before the window boundary 10"):
        insert(R10S5, state, {"ts": 9})


def test_out_of_order_within_the_open_period_keeps_arrival_order() -> None:
    state, _ = feed_ts(R10S5, empty_state(R10S5), 3, 14, 11, 10)
    assert ts_of(state.staged) == [14, 11, 10]
    state, _ = insert(R10S5, state, {"ts": 15})
    # window [5, 15): 3 is evicted, the rest become visible in the order they came
    assert ts_of(state.visible) == [14, 11, 10]


def test_slide_boundaries_are_multiples_of_slide_not_of_range() -> None:
    spec = TimeWindowSpec(range=7, slide=3, time_field="ts")
    state, _ = feed_ts(spec, empty_state(spec), 1, 2, 4, 8, 10)
    # first tuple opens [0, 3); boundaries 3, 6, 9 crossed; window [2, 9)
    assert (ts_of(state.visible), ts_of(state.staged), state.boundary) == ([2, 4, 8], [10], 9)


@pytest.mark.parametrize(
    ("tup", "message"),
    [
        ({"id": 1}, r"'ts' must be an integer timestamp, got None"),
        ({"ts": "12"}, r"'ts' must be an integer timestamp, got '12'"),
        ({"ts": 1.5}, r"'ts' must be an integer timestamp, got 1.5"),
        ({"ts": True}, r"'ts' must be an integer timestamp, got True"),
    ],
)
def test_untimed_tuple_is_rejected(tup: dict[str, Any], message: str) -> None:
    with pytest.raises(WindowError, match=message):
        insert(R10S5, empty_state(R10S5), tup)


# --- what the engine relies on ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "stamps", "new_ts", "expected_slides"),
    [
        (TupleWindowSpec(rows=5, slide=2), [1, 2, 3], 4, 1),
        (TupleWindowSpec(rows=5, slide=2), [1, 2], 3, 0),
        (R10S5, [4, 11], 13, 0),
        (R10S5, [4, 11], 27, 3),
    ],
)
def test_insert_leaves_the_old_state_unchanged(
    spec: WindowSpec, stamps: list[int], new_ts: int, expected_slides: int
) -> None:
    """An aborted TE's window write is dropped; the state it started from must be intact."""
    state = empty_state(spec)
    for t in stamps:
        state, _ = insert(spec, state, {"id": t, "ts": t})
    before = (list(state.staged), list(state.visible), state.boundary)
    after, slides = insert(spec, state, {"id": new_ts, "ts": new_ts})
    assert slides == expected_slides
    assert (list(state.staged), list(state.visible), state.boundary) == before
    retry, _ = insert(spec, state, {"id": new_ts, "ts": new_ts})
    assert retry == after


def test_insert_without_slide_shares_the_visible_tuples() -> None:
    spec = TupleWindowSpec(rows=5, slide=2)
    state, _ = insert(spec, empty_state(spec), {"id": 1})
    state, _ = insert(spec, state, {"id": 2})
    after, slides = insert(spec, state, {"id": 3})
    assert (slides, ids(after.visible)) == (0, [1, 2])
    assert after.visible is state.visible


TUPLE_SCHEMA = {
    "type": "record",
    "name": "Vote",
    "namespace": "leaderboard",
    "fields": [{"name": "id", "type": "long"}, {"name": "ts", "type": "long"}],
}


def avro_round_trip(record: dict[str, Any]) -> Any:
    schema = fastavro.parse_schema(state_schema(TUPLE_SCHEMA))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    buf.seek(0)
    return fastavro.schemaless_reader(buf, schema, schema)


@pytest.mark.parametrize(
    ("spec", "stamps"),
    [(TupleWindowSpec(rows=3, slide=2), [1, 2, 3, 4, 5]), (R10S5, [3, 8, 12, 13]), (R10S5, [])],
)
def test_record_round_trip_through_avro(spec: WindowSpec, stamps: list[int]) -> None:
    state = empty_state(spec)
    for i, t in enumerate(stamps):
        state, _ = insert(spec, state, {"id": i, "ts": t})
    assert state.staged or not stamps
    restored = from_record(avro_round_trip(to_record(state)))
    assert restored == state
    nxt = {"id": 99, "ts": 30}
    assert insert(spec, restored, nxt) == insert(spec, state, nxt)


def test_record_shape() -> None:
    state, _ = feed_ts(R10S5, empty_state(R10S5), 3, 12)
    assert to_record(state) == {"staged": [{"ts": 12}], "visible": [{"ts": 3}], "boundary": 10}
    assert to_record(empty_state(R10S5)) == {"staged": [], "visible": [], "boundary": None}


def test_state_schema_names_an_unqualified_tuple_type_by_its_name() -> None:
    schema = state_schema({"type": "record", "name": "T", "fields": []})
    assert schema["fields"][1]["type"] == {"type": "array", "items": "T"}
    fastavro.parse_schema(schema)


# --- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "slide", "message"),
    [
        (0, 1, r"ROWS 0 SLIDE 1: rows must be an integer >= 1, got 0"),
        (5, 0, r"ROWS 5 SLIDE 0: slide must be an integer >= 1, got 0"),
        (5, -2, r"slide must be an integer >= 1, got -2"),
        (5, 6, r"ROWS 5 SLIDE 6: slide must be <= rows, got slide=6 > rows=5"),
        (5.0, 1, r"rows must be an integer >= 1, got 5.0"),
        (True, 1, r"rows must be an integer >= 1, got True"),
    ],
)
def test_bad_tuple_window_parameters(rows: Any, slide: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TupleWindowSpec(rows=rows, slide=slide)


@pytest.mark.parametrize(
    ("range_", "slide", "field", "message"),
    [
        (0, 1, "ts", r"RANGE 0 SLIDE 1: range must be an integer >= 1, got 0"),
        (10, 0, "ts", r"RANGE 10 SLIDE 0: slide must be an integer >= 1, got 0"),
        (10, 11, "ts", r"slide must be <= range, got slide=11 > range=10"),
        (10, 5, "", r"RANGE 10 SLIDE 5: time_field must be a field name, got ''"),
    ],
)
def test_bad_time_window_parameters(range_: Any, slide: Any, field: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TimeWindowSpec(range=range_, slide=slide, time_field=field)


@pytest.mark.parametrize("spec", [TupleWindowSpec(rows=4, slide=1), TimeWindowSpec(10, 5, "ts")])
def test_a_window_knows_whether_its_tuples_are_flat_and_keeps_its_own_copies(
    spec: WindowSpec,
) -> None:
    """`flat` lets readers copy tuples shallowly; one tuple holding a list clears it, for
    every state after it, and a decoded state works it out again."""
    flat_tuple: dict[str, Any] = {"id": 1, "ts": 1}
    state, _ = insert(spec, empty_state(spec), flat_tuple)
    flat_tuple["id"] = 99
    assert state.flat
    assert ids(state.staged + state.visible) == [1], "the window keeps its own copy"
    nested: dict[str, Any] = {"id": 2, "ts": 7, "tags": ["a"]}
    state, _ = insert(spec, state, nested)
    nested["tags"].append("b")
    assert not state.flat
    assert [r.get("tags") for r in state.staged + state.visible if "tags" in r] == [["a"]]
    state, _ = insert(spec, state, {"id": 3, "ts": 8})
    assert not state.flat
    decoded = from_record(to_record(state))
    assert not decoded.flat and decoded == state
    assert from_record(to_record(WindowState(({"id": 4, "ts": 9},), ()))).flat
