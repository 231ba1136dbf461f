"""The interleave benchmark's input and its tally: an unknown kind of work between batches
is refused by name, and each kind's µs a batch is its own time over its own batches."""

from __future__ import annotations

import pytest
import typer

from bench.interleave import BETWEEN, Tally, parse_kinds


def test_kinds_are_parsed_in_order_and_trimmed() -> None:
    assert parse_kinds(" sleep, none ,c") == ["sleep", "none", "c"]
    assert set(BETWEEN) >= {"none", "sleep", "python", "c"}


@pytest.mark.parametrize("text, named", [("none,nap", "nap"), (" , ", "(none given)")])
def test_an_unknown_or_missing_kind_is_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(typer.BadParameter, match=r"unknown kind .*choose from") as e:
        parse_kinds(text)
    assert named in str(e.value)


def test_each_kind_is_averaged_over_its_own_batches() -> None:
    tally = Tally(["none", "sleep", "c"])
    for kind, seconds in [("none", 0.0001), ("sleep", 0.0003), ("none", 0.0002)]:
        tally.add(kind, seconds)
    per = tally.us_per_batch()
    assert per == pytest.approx({"none": 150.0, "sleep": 300.0})
    assert "c" not in per  # no batch of it: no figure, not a division by zero
