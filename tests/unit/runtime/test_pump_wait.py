"""The pump's poll timeouts, as librdkafka will keep them (whole milliseconds, truncated)."""

from __future__ import annotations

import pytest

from txstream.runtime.pump import whole_ms


def kept_ms(seconds: float) -> int:
    """What confluent-kafka hands librdkafka for a poll of `seconds`."""
    return int(seconds * 1000)


@pytest.mark.parametrize("seconds", [0.0001, 0.0004, 0.00099, 0.001, 0.0012, 0.007, 0.0099, 0.05])
def test_a_wait_is_kept_whole_and_never_shorter(seconds: float) -> None:
    kept = kept_ms(whole_ms(seconds))
    assert kept >= seconds * 1000 - 1e-6
    assert kept < seconds * 1000 + 1


def test_a_wait_under_a_millisecond_still_waits() -> None:
    """Truncated, 0.4 ms would be a poll that returns at once: a spin while a group waits."""
    assert kept_ms(0.0004) == 0
    assert kept_ms(whole_ms(0.0004)) == 1


def test_no_wait_stays_no_wait() -> None:
    assert whole_ms(0.0) == 0.0
    assert whole_ms(-0.002) == 0.0
