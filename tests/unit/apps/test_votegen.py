"""The vote generator: determinism, S-Store's rates over 100k votes, and the file it writes.

Expected rates come from S-Store's generator rules (see leaderboard/votegen.py), worked out by
hand; tolerances are several standard deviations wide.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from leaderboard.reference_data import load_area_code_states
from leaderboard.votegen import generate_votes, main, write_votes_file
from leaderboard.votes_file import Vote, iter_votes

N = 50
COUNT = 100_000
AREA_CODES = list(load_area_code_states())


@pytest.fixture(scope="module")
def votes() -> list[Vote]:
    return list(generate_votes(COUNT, N, seed=11))


def split_resends(votes: list[Vote]) -> tuple[list[Vote], list[tuple[int, Vote]]]:
    """New votes, and (position, vote) of each line whose id was seen before."""
    fresh: list[Vote] = []
    resent: list[tuple[int, Vote]] = []
    seen: set[int] = set()
    for position, vote in enumerate(votes):
        if vote.vote_id in seen:
            resent.append((position, vote))
        else:
            seen.add(vote.vote_id)
            fresh.append(vote)
    return fresh, resent


def test_same_seed_same_votes_other_seed_other_votes() -> None:
    first = list(generate_votes(2000, N, seed=5))
    assert first == list(generate_votes(2000, N, seed=5))
    assert first != list(generate_votes(2000, N, seed=6))


def test_a_shorter_run_is_a_prefix_of_a_longer_one() -> None:
    assert list(generate_votes(300, N, seed=5)) == list(generate_votes(3000, N, seed=5))[:300]


def test_new_votes_are_numbered_from_one(votes: list[Vote]) -> None:
    fresh, _ = split_resends(votes)
    assert [v.vote_id for v in fresh] == list(range(1, len(fresh) + 1))


def test_about_one_line_in_500_is_a_resend_of_a_recent_vote(votes: list[Vote]) -> None:
    fresh, resent = split_resends(votes)
    assert 140 <= len(resent) <= 260  # 0.2% of 100k = 200, sd 14
    by_id = {v.vote_id: v for v in fresh}
    for position, vote in resent:
        assert vote == by_id[vote.vote_id]  # an exact copy
        newest_before = max(v.vote_id for v in votes[max(0, position - 400) : position])
        assert newest_before - vote.vote_id < 100  # one of the last 100 new votes


def test_resends_can_be_turned_off() -> None:
    _, resent = split_resends(list(generate_votes(20_000, N, seed=3, resend_fraction=0.0)))
    assert resent == []


def test_one_percent_vote_for_the_invalid_contestant_999(votes: list[Vote]) -> None:
    fresh, _ = split_resends(votes)
    invalid = sum(v.contestant_number == 999 for v in fresh)
    assert 0.008 * len(fresh) <= invalid <= 0.012 * len(fresh)  # 1%, sd 0.03%
    assert {v.contestant_number for v in fresh} == set(range(1, N + 1)) | {999}


def test_area_codes_are_uniform_over_the_305(votes: list[Vote]) -> None:
    fresh, _ = split_resends(votes)
    per_area = Counter(v.phone_number // 10**7 for v in fresh)
    assert set(per_area) == set(AREA_CODES)
    assert min(per_area.values()) > 230  # 328 expected, sd 18
    assert max(per_area.values()) < 430


def test_each_area_has_s_stores_favourite(votes: list[Vote]) -> None:
    # Per area, a vote (not 999) goes to the favourite with probability 1/2 + 1/(2N) = 51%,
    # and the favourite of the area at index i is 1 (30% of areas) or floor(|sin i| * N) + 1.
    fresh, _ = split_resends(votes)
    by_area: defaultdict[int, Counter[int]] = defaultdict(Counter)
    for v in fresh:
        if v.contestant_number != 999:
            by_area[v.phone_number // 10**7][v.contestant_number] += 1
    modal_votes = 0
    ones = 0
    for i, code in enumerate(AREA_CODES):
        favourite, count = by_area[code].most_common(1)[0]
        assert favourite in {1, int(abs(math.sin(i)) * N) + 1}
        modal_votes += count
        ones += favourite == 1
    share = modal_votes / sum(sum(c.values()) for c in by_area.values())
    assert 0.50 <= share <= 0.52  # sd 0.0016
    assert 0.20 <= ones / len(AREA_CODES) <= 0.42  # 30% and a few sin-picked 1s, sd 2.6%


def test_every_contestant_gets_its_uniform_share(votes: list[Vote]) -> None:
    fresh, _ = split_resends(votes)
    counts = Counter(v.contestant_number for v in fresh)
    assert min(counts[c] for c in range(1, N + 1)) > 0.5 * 0.99 * len(fresh) / N * 0.8


def test_phones_repeat_at_the_birthday_rate_of_the_subscriber_pool(votes: list[Vote]) -> None:
    # 305 areas x 5,000 subscribers = P phones; n uniform draws repeat about n^2 / 2P times.
    fresh, _ = split_resends(votes)
    repeats = len(fresh) - len({v.phone_number for v in fresh})
    expected = len(fresh) ** 2 / (2 * 305 * 5_000)
    assert 0.8 * expected <= repeats <= 1.2 * expected


def test_s_stores_phone_space_almost_never_repeats() -> None:
    fresh = list(generate_votes(COUNT, N, seed=2, resend_fraction=0.0, subscribers_per_area=10**7))
    assert len(fresh) - len({v.phone_number for v in fresh}) <= 10  # about 1.6 expected


def test_phone_numbers_are_area_code_and_seven_digits() -> None:
    vs = list(generate_votes(5000, N, seed=4, subscribers_per_area=3, resend_fraction=0.0))
    per_area: defaultdict[int, set[int]] = defaultdict(set)
    for v in vs:
        per_area[v.phone_number // 10**7].add(v.phone_number % 10**7)
    assert set(per_area) <= set(AREA_CODES)
    assert all(len(suffixes) <= 3 for suffixes in per_area.values())
    assert sum(len(suffixes) == 3 for suffixes in per_area.values()) > 250
    suffixes = set().union(*per_area.values())
    assert len(suffixes) == 3
    assert max(suffixes) > 1000  # spread over the 7 digits, not 0, 1, 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1}, "count"),
        ({"contestants": 0}, "contestants"),
        ({"contestants": 999}, "contestants"),
        ({"resend_fraction": 1.0}, "resend"),
        ({"subscribers_per_area": 0}, "subscribers"),
        ({"subscribers_per_area": 10**7 + 1}, "subscribers"),
    ],
)
def test_bad_arguments_fail_at_the_call(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"count": 10, "contestants": N, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=message):
        generate_votes(**args)


def test_written_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "votes.txt"
    assert write_votes_file(path, 3000, 12, seed=9) == 3000
    assert list(iter_votes(path)) == list(generate_votes(3000, 12, seed=9))


def test_command_line_writes_the_same_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli.txt"
    assert main(["--count", "500", "--contestants", "12", "--seed", "9", "--out", str(out)]) == 0
    assert "wrote 500 votes" in capsys.readouterr().out
    write_votes_file(tmp_path / "api.txt", 500, 12, seed=9)
    assert out.read_bytes() == (tmp_path / "api.txt").read_bytes()


def test_command_line_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--count", "5", "--contestants", "1000", "--out", str(tmp_path / "x.txt")])
    assert exited.value.code == 2
