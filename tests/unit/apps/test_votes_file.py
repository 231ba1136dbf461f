"""The votes-file format: batching by line, strict parsing with the line named, writing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leaderboard.votes_file import (
    Vote,
    VoteBatch,
    VotesFileError,
    iter_batches,
    iter_votes,
    validate_votes_file,
    write_votes,
)

FIVE = "1 2015550100 3\n2 2015550101 1\n3 2015550102 2\n4 2015550103 999\n5 2015550104 1\n"


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "votes.txt"
    if isinstance(text, str):
        path.write_text(text)
    else:
        path.write_bytes(text)
    return path


def test_batch_b_holds_lines_b_minus_1_times_k_plus_1_to_b_times_k(tmp_path: Path) -> None:
    batches = list(iter_batches(write(tmp_path, FIVE), 2))
    assert batches == [
        VoteBatch(1, (Vote(1, 2015550100, 3), Vote(2, 2015550101, 1))),
        VoteBatch(2, (Vote(3, 2015550102, 2), Vote(4, 2015550103, 999))),
        VoteBatch(3, (Vote(5, 2015550104, 1),)),
    ]


def test_batch_size_one_is_one_vote_per_batch(tmp_path: Path) -> None:
    batches = list(iter_batches(write(tmp_path, FIVE), 1))
    assert [b.batch_id for b in batches] == [1, 2, 3, 4, 5]
    assert [b.votes[0].vote_id for b in batches] == [1, 2, 3, 4, 5]


def test_batch_size_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch size"):
        next(iter_batches(write(tmp_path, FIVE), 0))


def test_any_whitespace_separates_fields(tmp_path: Path) -> None:
    path = write(tmp_path, b"  1\t2015550100   3 \r\n2 2015550101\t1")
    assert list(iter_votes(path)) == [Vote(1, 2015550100, 3), Vote(2, 2015550101, 1)]


def test_empty_file_has_no_votes(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    assert validate_votes_file(path) == 0
    assert list(iter_batches(path, 3)) == []


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ("4 2015550103", "expected 3 fields"),
        ("4 2015550103 1 7", "expected 3 fields"),
        ("", "expected 3 fields"),
        ("4 2015550103 abc", "contestant_number 'abc' is not a non-negative decimal integer"),
        ("4 201555.0103 1", "phone_number '201555.0103' is not"),
        ("4 2015_550_103 1", "phone_number '2015_550_103' is not"),
        ("+4 2015550103 1", "vote_id '\\+4' is not"),
        ("-4 2015550103 1", "vote_id -4 is negative"),
        ("4 2015550103 -1", "contestant_number -1 is negative"),
        ("9223372036854775808 2015550103 1", "vote_id 9223372036854775808 is too large"),
    ],
)
def test_malformed_line_is_named_with_file_and_line(
    tmp_path: Path, bad_line: str, reason: str
) -> None:
    lines = FIVE.splitlines()
    lines[3] = bad_line
    path = write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(VotesFileError, match=reason) as caught:
        validate_votes_file(path)
    assert caught.value.line_number == 4
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}:4: ")


def test_non_ascii_digits_are_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "1 2015550100 \u0663\n")  # ARABIC-INDIC DIGIT THREE: int() takes it
    with pytest.raises(VotesFileError, match=":1: contestant_number"):
        validate_votes_file(path)


def test_largest_signed_64_bit_value_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "9223372036854775807 2015550100 1\n")
    assert next(iter_votes(path)).vote_id == 2**63 - 1


def test_validate_checks_to_the_last_line(tmp_path: Path) -> None:
    path = write(tmp_path, FIVE + "6 x 1\n")
    with pytest.raises(VotesFileError, match=":6: "):
        validate_votes_file(path)


def test_validate_counts_votes(tmp_path: Path) -> None:
    assert validate_votes_file(write(tmp_path, FIVE)) == 5


def test_batches_stream_before_reaching_a_bad_line(tmp_path: Path) -> None:
    batches = iter_batches(write(tmp_path, FIVE + "6 x 1\n"), 2)
    assert next(batches).batch_id == 1
    assert next(batches).batch_id == 2
    with pytest.raises(VotesFileError, match=":6: "):
        next(batches)


def test_write_then_read_round_trips_and_uses_s_stores_line_format(tmp_path: Path) -> None:
    votes = [Vote(1, 2015550100, 3), Vote(2, 9075550199, 999), Vote(1, 2015550100, 3)]
    path = tmp_path / "out.txt"
    assert write_votes(path, votes) == 3
    assert path.read_text() == "1 2015550100 3\n2 9075550199 999\n1 2015550100 3\n"
    assert list(iter_votes(path)) == votes


def test_write_replaces_a_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old contents\n" * 10)
    write_votes(path, [Vote(1, 2015550100, 3)])
    assert path.read_text() == "1 2015550100 3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("1 2015550100 3\n")

    def failing() -> Iterator[Vote]:
        yield Vote(2, 2015550101, 1)
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        write_votes(path, failing())
    assert path.read_text() == "1 2015550100 3\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
