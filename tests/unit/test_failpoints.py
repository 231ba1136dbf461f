"""Failpoints fire once, at the hit asked for, and a malformed spec is refused by name."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from txstream import failpoints


@pytest.fixture(autouse=True)
def disarmed() -> Iterator[None]:
    yield
    failpoints.arm("")


def test_drop_fires_once_at_the_nth_hit() -> None:
    failpoints.arm("coordinator.drop_prepare=drop@2")
    hits = [failpoints.hit("coordinator.drop_prepare") for _ in range(4)]
    assert hits == [False, True, False, False]
    assert failpoints.hit("coordinator.drop_decision") is False  # not armed


def test_unset_points_never_fire() -> None:
    failpoints.arm("")
    assert not any(failpoints.hit("engine.after_vote") for _ in range(3))


@pytest.mark.parametrize("spec", ["x=explode", "x=drop@two", "x"])
def test_malformed_spec_names_the_entry(spec: str) -> None:
    with pytest.raises(ValueError, match="must be name=kill"):
        failpoints.arm(spec)
