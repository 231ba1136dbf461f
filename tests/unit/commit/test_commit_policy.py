"""When a group commit is due: the interval, the longer busy interval under a backlog, off."""

from __future__ import annotations

import pytest

from txstream.commit.policy import CommitPolicy


def test_a_backlog_keeps_a_group_open_for_the_busy_interval() -> None:
    policy = CommitPolicy(interval_ms=10, max_batches=100, busy_interval_ms=40)
    assert (policy.wait_ms(backlog=False), policy.wait_ms(backlog=True)) == (10, 40)


def test_the_busy_interval_never_shortens_the_interval() -> None:
    policy = CommitPolicy(interval_ms=50, busy_interval_ms=20)
    assert policy.wait_ms(backlog=True) == 50


def test_off_commits_every_batch_backlog_or_not() -> None:
    off = CommitPolicy.off()
    assert (off.max_batches, off.wait_ms(False), off.wait_ms(True)) == (1, 0, 0)


@pytest.mark.parametrize("bad", [{"interval_ms": -1}, {"max_batches": 0}, {"busy_interval_ms": -5}])
def test_bad_settings_are_refused_naming_the_values(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="busy_interval_ms >= 0"):
        CommitPolicy(**bad)
