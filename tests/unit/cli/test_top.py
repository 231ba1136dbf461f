"""`txstream top`'s arithmetic, and how services find their way into it and into Prometheus."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from txstream.config import Settings
from txstream.observability import scrape_rates
from txstream.observability.targets import live_targets, serve_metrics, targets_dir


def page(te_count: int, buckets: dict[str, int], aborts: int, batches: int, lag: int) -> str:
    lines = [
        "# TYPE txstream_te_seconds histogram",
        *(f'txstream_te_seconds_bucket{{app="a",procedure="p",le="{le}"}} {n}'
          for le, n in buckets.items()),
        f'txstream_te_seconds_count{{app="a",procedure="p"}} {te_count}',
        f'txstream_te_seconds_sum{{app="a",procedure="p"}} {te_count * 0.001}',
        "# TYPE txstream_aborts_total counter",
        f'txstream_aborts_total{{app="a",procedure="p",reason="constraint_violation"}} {aborts}',
        "# TYPE txstream_batches_committed_total counter",
        f'txstream_batches_committed_total{{app="a",partition="0"}} {batches}',
        "# TYPE txstream_input_lag_records gauge",
        f'txstream_input_lag_records{{app="a",topic="t",partition="0"}} {lag}',
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_quantile_interpolates_inside_the_bucket_like_prometheus() -> None:
    buckets = [(0.001, 50.0), (0.01, 90.0), (0.1, 100.0), (math.inf, 100.0)]
    assert scrape_rates.quantile(0.5, buckets) == pytest.approx(0.001)
    assert scrape_rates.quantile(0.7, buckets) == pytest.approx(0.001 + 0.009 * 0.5)
    assert scrape_rates.quantile(0.99, buckets) == pytest.approx(0.01 + 0.09 * 0.9)


def test_quantile_in_the_open_bucket_is_the_highest_finite_bound() -> None:
    assert scrape_rates.quantile(0.99, [(0.5, 10.0), (math.inf, 20.0)]) == 0.5


def test_quantile_of_nothing_is_nan() -> None:
    assert math.isnan(scrape_rates.quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]))


def test_rates_come_from_the_increase_between_two_scrapes() -> None:
    before = scrape_rates.parse(page(100, {"0.001": 100, "0.01": 100, "+Inf": 100}, 1, 50, 7))
    after = scrape_rates.parse(page(300, {"0.001": 200, "0.01": 300, "+Inf": 300}, 5, 250, 3))
    (row,) = scrape_rates.procedures(before, after, dt=2.0)
    assert (row.app, row.procedure) == ("a", "p")
    assert row.per_s == 100.0
    assert row.p50_s == pytest.approx(0.001)  # 100 of the 200 new TEs were under 1 ms
    assert row.aborts_per_s == 2.0 and row.aborts_total == 5
    assert row.top_reason == "constraint_violation"
    (app,) = scrape_rates.apps(before, after, dt=2.0)
    assert (app.batches_per_s, app.batches_total, app.lag) == (100.0, 250.0, 3.0)


def test_a_restarted_process_counts_from_zero_not_negative() -> None:
    before = scrape_rates.parse(page(500, {"+Inf": 500}, 9, 900, 0))
    after = scrape_rates.parse(page(40, {"+Inf": 40}, 1, 30, 0))
    (row,) = scrape_rates.procedures(before, after, dt=1.0)
    assert row.per_s == 40.0 and row.aborts_per_s == 1.0


def test_a_served_target_is_registered_and_a_dead_ones_file_is_pruned(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    port = serve_metrics(settings, "worker")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert b"python_info" in resp.read()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = targets_dir(settings) / f"worker-{dead.stdout.strip()}.json"
    labels = {"job": "worker", "pid": dead.stdout.strip()}
    stale.write_text(json.dumps([{"targets": ["127.0.0.1:1"], "labels": labels}]))
    (found,) = live_targets(settings)
    assert (found.job, found.address, found.pid) == ("worker", f"127.0.0.1:{port}", os.getpid())
    assert not stale.exists()
    group = json.loads((targets_dir(settings) / f"worker-{os.getpid()}.json").read_text())
    assert group == [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"job": "worker", "pid": str(os.getpid())}}
    ]
