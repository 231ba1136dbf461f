"""The transaction-floor benchmark's tally: percentiles in milliseconds, the slow rounds
counted apart, and a run whose rounds were all warm-up refused by name."""

from __future__ import annotations

import pytest

from bench.txn_floor import SLOW_MS, Summary, table


def test_percentiles_are_in_milliseconds_whatever_the_order() -> None:
    seconds = [i / 1000 for i in range(1, 101)]  # 1..100 ms, given out of order below
    s = Summary.of(seconds[50:] + seconds[:50])
    assert s.n == 100
    assert (s.p50, s.p90, s.p99, s.max) == pytest.approx((50.5, 90.1, 99.01, 100.0))
    assert s.slow == sum(ms > SLOW_MS for ms in range(1, 101))


def test_no_timed_round_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="warm-up"):
        Summary.of([])


def test_the_table_has_a_row_per_step_under_its_header() -> None:
    rows = {"plain flush": Summary.of([0.0005]), "transaction flush": Summary.of([0.02])}
    text = table(rows, "Date: today.")
    lines = text.splitlines()
    assert lines[0] == "Date: today."
    assert lines[4].startswith("| plain flush | 1 | 0.50 ms |")
    assert lines[5].endswith("| 20.0 ms | 1 |")
