"""The leaderboard's reference data, and the serial reference implementation on hand-computed
cases: every expected document below was worked out by hand from leaderboard.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leaderboard.reference_data import (
    ReferenceDataError,
    contestants,
    load_area_code_states,
    load_contestant_names,
)
from tests.support.reference.leaderboard_ref import run_reference

SHARED_DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "leaderboard"

# Distinct phone numbers, so only the votes that mean to share a phone do.
A, B, C, D, E, F, G = (2_015_550_100 + i for i in range(7))


def votes_file(tmp_path: Path, votes: list[tuple[int, int, int]]) -> Path:
    path = tmp_path / "votes.txt"
    path.write_text("".join(f"{v} {p} {c}\n" for v, p, c in votes))
    return path


def rejected(dup: int = 0, invalid: int = 0, over: int = 0) -> dict[str, int]:
    return {"duplicate_vote_id": dup, "invalid_contestant": invalid, "over_vote_limit": over}


def current(*pairs: tuple[int, int]) -> list[dict[str, int]]:
    return [{"contestant_number": c, "num_votes": n} for c, n in pairs]


def removal(contestant: int, num_votes: int, at_accepted: int) -> dict[str, int]:
    return {"contestant_number": contestant, "num_votes": num_votes, "at_accepted": at_accepted}


# --- reference data -------------------------------------------------------------------------


def test_area_codes_are_s_stores_305_in_order() -> None:
    states = load_area_code_states()
    codes = list(states)
    assert len(codes) == 305
    assert codes[:4] == [907, 205, 256, 334]
    assert codes[-1] == 307
    assert states[907] == "AK"
    assert states[307] == "WY"


def test_contestant_names_wrap_around_past_the_list() -> None:
    names = load_contestant_names()
    assert len(names) == 25
    board = contestants(52)
    assert list(board) == list(range(1, 53))
    assert board[1] == board[26] == board[51] == "Jann Arden"
    assert board[25] == board[50] == "Neil Young"
    assert board[2] == board[27] == board[52] == "Micah Barnes"


def test_contestants_needs_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        contestants(0)


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="no shared/ beside the checkout")
@pytest.mark.parametrize("name", ["area_code_state.csv", "contestants.csv"])
def test_packaged_data_matches_the_shared_data(name: str) -> None:
    packaged = Path(__file__).resolve().parents[3] / "apps" / "leaderboard" / "data" / name
    assert packaged.read_bytes() == (SHARED_DATA / name).read_bytes()


def test_reference_data_loads_from_another_directory(tmp_path: Path) -> None:
    (tmp_path / "area_code_state.csv").write_text("area_code,state\n201,NJ\n907,AK\n")
    (tmp_path / "contestants.csv").write_text("contestant_number,contestant_name\n1,X\n2,Y\n")
    assert load_area_code_states(tmp_path) == {201: "NJ", 907: "AK"}
    assert contestants(3, tmp_path) == {1: "X", 2: "Y", 3: "X"}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("code,state\n201,NJ\n", ":1:"),
        ("area_code,state\n201,NJ\n2x1,NY\n", ":3:"),
        ("area_code,state\n201,NJ\n201,NY\n", ":3:"),
        ("area_code,state\n201\n", ":2:"),
    ],
)
def test_malformed_area_codes_name_the_line(tmp_path: Path, text: str, where: str) -> None:
    (tmp_path / "area_code_state.csv").write_text(text)
    with pytest.raises(ReferenceDataError, match=where):
        load_area_code_states(tmp_path)


def test_contestant_numbers_must_run_from_one(tmp_path: Path) -> None:
    (tmp_path / "contestants.csv").write_text("contestant_number,contestant_name\n1,X\n3,Y\n")
    with pytest.raises(ReferenceDataError, match=":3: expected contestant 2"):
        load_contestant_names(tmp_path)


# --- validate --------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 2, 3])
def test_duplicate_id_is_rejected_even_when_the_first_was_rejected(
    tmp_path: Path, batch_size: int
) -> None:
    path = votes_file(tmp_path, [(1, A, 999), (1, B, 1), (2, B, 1)])
    doc = run_reference(path, contestants=2, batch_size=batch_size)
    assert doc["accepted"] == 1
    assert doc["rejected"] == rejected(dup=1, invalid=1)
    assert doc["contestants"] == current((1, 1), (2, 0))


def test_duplicate_id_of_an_accepted_vote_is_rejected(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(7, A, 1), (7, B, 2), (8, B, 2)])
    doc = run_reference(path, contestants=2)
    assert doc["rejected"] == rejected(dup=1)
    assert doc["contestants"] == current((1, 1), (2, 1))


def test_invalid_contestants_do_not_use_up_the_phone(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(1, A, 3), (2, A, 0), (3, A, 999), (4, A, 2)])
    doc = run_reference(path, contestants=2)
    assert doc["accepted"] == 1
    assert doc["rejected"] == rejected(invalid=3)
    assert doc["contestants"] == current((1, 0), (2, 1))


def test_max_votes_counts_votes_per_phone(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(1, A, 1), (2, A, 2), (3, A, 1), (4, B, 1)])
    doc = run_reference(path, contestants=2, max_votes=2)
    assert doc["rejected"] == rejected(over=1)
    assert doc["contestants"] == current((1, 2), (2, 1))


def test_phone_over_limit_is_freed_when_its_contestant_is_removed(tmp_path: Path) -> None:
    # N=2, T=3. A votes 1; A again is over the limit; B and C vote 2, so A=3 is due and
    # contestant 1 (1 vote, against 2) is removed with its vote: A may vote again, for 2 now.
    path = votes_file(
        tmp_path,
        [(1, A, 1), (2, A, 2), (3, B, 2), (4, C, 2), (5, A, 1), (6, A, 2), (7, B, 2)],
    )
    doc = run_reference(path, contestants=2, threshold=3)
    assert doc == {
        "accepted": 4,
        "rejected": rejected(invalid=1, over=2),
        "contestants": current((2, 3)),
        "removed": [removal(1, 1, 3)],
        "top3": [[2, 3]],
        "bottom3": [[2, 3]],
        "trending3": [],
    }


# --- remove_lowest and the leaderboards -------------------------------------------------------


def test_removal_ties_go_to_the_highest_number_and_zero_vote_contestants_count(
    tmp_path: Path,
) -> None:
    # N=4, T=2. At A=2: 1:1 2:1 3:0 4:0, so 4 goes. At A=4: 1:1 2:1 3:2, so 2 goes.
    path = votes_file(tmp_path, [(1, A, 1), (2, B, 2), (3, C, 3), (4, D, 3)])
    doc = run_reference(path, contestants=4, threshold=2)
    assert doc["removed"] == [removal(4, 0, 2), removal(2, 1, 4)]
    assert doc["contestants"] == current((1, 1), (3, 2))
    assert doc["top3"] == [[3, 2], [1, 1]]
    assert doc["bottom3"] == [[1, 1], [3, 2]]


def test_the_last_contestant_is_never_removed(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(1, A, 1), (2, B, 1), (3, C, 1)])
    doc = run_reference(path, contestants=2, threshold=1)
    assert doc["removed"] == [removal(2, 0, 1)]
    assert doc["contestants"] == current((1, 3))


def test_leaderboard_orderings_break_ties_by_number(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(1, A, 2), (2, B, 3), (3, C, 3), (4, D, 4)])
    doc = run_reference(path, contestants=4)
    assert doc["contestants"] == current((1, 0), (2, 1), (3, 2), (4, 1))
    assert doc["top3"] == [[3, 2], [2, 1], [4, 1]]
    assert doc["bottom3"] == [[1, 0], [4, 1], [2, 1]]


# --- batches ----------------------------------------------------------------------------------


def test_removal_due_mid_batch_runs_after_the_whole_batch_is_validated(tmp_path: Path) -> None:
    # N=2, T=1, K=2: both votes of batch 1 are validated while 1 and 2 are both current, then
    # two removals are due: the tie 1:1 2:1 removes 2, and the second finds one contestant left.
    path = votes_file(tmp_path, [(1, A, 1), (2, B, 2)])
    doc = run_reference(path, contestants=2, threshold=1, batch_size=2)
    assert doc["accepted"] == 2
    assert doc["rejected"] == rejected()
    assert doc["removed"] == [removal(2, 1, 2)]
    assert doc["contestants"] == current((1, 1))


def test_same_votes_one_per_batch_remove_before_the_second_vote(tmp_path: Path) -> None:
    # K=1: after vote 1, A=1 is due and 2 (no votes) goes; vote 2 is then invalid.
    path = votes_file(tmp_path, [(1, A, 1), (2, B, 2)])
    doc = run_reference(path, contestants=2, threshold=1, batch_size=1)
    assert doc["accepted"] == 1
    assert doc["rejected"] == rejected(invalid=1)
    assert doc["removed"] == [removal(2, 0, 1)]


def test_a_short_last_batch_is_processed(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(1, A, 1), (2, B, 1), (3, C, 2)])
    doc = run_reference(path, contestants=2, batch_size=2)
    assert doc["contestants"] == current((1, 2), (2, 1))


# --- the trending window ----------------------------------------------------------------------

WINDOW_VOTES = [(1, A, 1), (2, B, 1), (3, C, 2), (4, D, 3), (5, E, 3), (6, F, 2), (7, G, 1)]


@pytest.mark.parametrize(
    ("accepted", "trending3"),
    [
        (2, []),  # nothing slid in yet
        (3, [[1, 2], [2, 1]]),  # first slide: votes 1..3
        (5, [[1, 2], [2, 1]]),  # votes 4, 5 staged
        (6, [[2, 2], [3, 2]]),  # second slide: last 4 of 1..6 = votes 3..6
        (7, [[2, 2], [3, 2]]),  # vote 7 staged
    ],
)
def test_window_stages_votes_until_a_slide(
    tmp_path: Path, accepted: int, trending3: list[list[int]]
) -> None:
    path = votes_file(tmp_path, WINDOW_VOTES[:accepted])
    doc = run_reference(path, contestants=3, threshold=1000, window=4, slide=3)
    assert doc["accepted"] == accepted
    assert doc["trending3"] == trending3


def test_window_counts_only_accepted_votes(tmp_path: Path) -> None:
    path = votes_file(tmp_path, [(1, A, 1), (2, A, 2), (3, B, 999), (4, C, 2), (5, D, 2)])
    doc = run_reference(path, contestants=2, threshold=1000, window=2, slide=1)
    assert doc["trending3"] == [[2, 2]]


def test_trending_ignores_removed_contestants(tmp_path: Path) -> None:
    # T=3: at A=3, 1 has 1 vote and 2 has 2, so 1 is removed; its vote stays in the window.
    path = votes_file(tmp_path, [(1, A, 1), (2, B, 2), (3, C, 2)])
    doc = run_reference(path, contestants=2, threshold=3, window=3, slide=1)
    assert doc["removed"] == [removal(1, 1, 3)]
    assert doc["trending3"] == [[2, 2]]


# --- the document -----------------------------------------------------------------------------


def test_result_document_shape(tmp_path: Path) -> None:
    # Vote i goes to i % 5 + 1: 8 votes each; the window's last slide holds votes 31..40.
    path = votes_file(tmp_path, [(i, 2_015_550_000 + i, i % 5 + 1) for i in range(1, 41)])
    doc = run_reference(path, contestants=5, threshold=1000, window=10, slide=5)
    assert doc == {
        "accepted": 40,
        "rejected": rejected(),
        "contestants": current((1, 8), (2, 8), (3, 8), (4, 8), (5, 8)),
        "removed": [],
        "top3": [[1, 8], [2, 8], [3, 8]],
        "bottom3": [[5, 8], [4, 8], [3, 8]],
        "trending3": [[1, 2], [2, 2], [3, 2]],
    }
    assert json.loads(json.dumps(doc)) == doc


@pytest.mark.parametrize("name", ["contestants", "threshold", "window", "slide", "batch_size"])
def test_parameters_must_be_positive(tmp_path: Path, name: str) -> None:
    path = votes_file(tmp_path, [(1, A, 1)])
    with pytest.raises(ValueError, match=name):
        run_reference(path, **{name: 0})
