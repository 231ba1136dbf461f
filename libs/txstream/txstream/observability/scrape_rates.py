"""What `txstream top` computes: rates and latency quantiles from two scrapes of /metrics.

Prometheus does this with `rate()` and `histogram_quantile()`; without a Prometheus, the same
arithmetic over two scrapes taken `dt` seconds apart gives the same figures for that interval.
"""

from __future__ import annotations

import math
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]  # (sample name, sorted labels) -> value


def parse(text: str, extra: Mapping[str, str] | None = None) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = {**s.labels, **(extra or {})}
            samples[(s.name, tuple(sorted(labels.items())))] = float(s.value)
    return samples


def scrape(addresses: Iterable[str], timeout_s: float = 5.0) -> Samples:
    """Every target's samples, each labelled with its `instance` so series never collide.
    A target that does not answer is skipped: it shows as missing, not as an error."""
    merged: Samples = {}
    for address in addresses:
        try:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as resp:
                text = resp.read().decode()
        except OSError:
            continue
        merged.update(parse(text, {"instance": address}))
    return merged


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """The q-quantile of a histogram given cumulative (upper bound, count) pairs,
    interpolated linearly inside the bucket, as Prometheus's histogram_quantile does."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return math.nan
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # the highest finite bound, as Prometheus answers
            inside = count - lower_count
            fraction = 0.0 if inside <= 0 else (rank - lower_count) / inside
            return lower_bound + (bound - lower_bound) * fraction
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass(frozen=True)
class ProcedureRow:
    app: str
    procedure: str
    per_s: float
    p50_s: float
    p99_s: float
    aborts_per_s: float
    aborts_total: float
    top_reason: str


@dataclass(frozen=True)
class AppRow:
    app: str
    batches_per_s: float
    batches_total: float
    lag: float


def _sum_by(samples: Samples, name: str, keys: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    totals: dict[tuple[str, ...], float] = defaultdict(float)
    for (sample, labels), value in samples.items():
        if sample == name:
            d = dict(labels)
            totals[tuple(d.get(k, "") for k in keys)] += value
    return totals


def _delta(
    before: Mapping[tuple[str, ...], float], after: Mapping[tuple[str, ...], float]
) -> dict[tuple[str, ...], float]:
    """Increase per series; a series that went down was reset (its process restarted)."""
    return {k: v - before.get(k, 0.0) if v >= before.get(k, 0.0) else v for k, v in after.items()}


def procedures(before: Samples, after: Samples, dt: float) -> list[ProcedureRow]:
    by = ("app", "procedure")
    counts_now = _sum_by(after, "txstream_te_seconds_count", by)
    counts = _delta(_sum_by(before, "txstream_te_seconds_count", by), counts_now)
    buckets = _delta(_sum_by(before, "txstream_te_seconds_bucket", (*by, "le")),
                     _sum_by(after, "txstream_te_seconds_bucket", (*by, "le")))  # fmt: skip
    abort_keys = (*by, "reason")
    aborts_now = _sum_by(after, "txstream_aborts_total", abort_keys)
    aborts = _delta(_sum_by(before, "txstream_aborts_total", abort_keys), aborts_now)
    names = set(counts_now) | {k[:2] for k in aborts_now}
    rows = []
    for app, proc in sorted(names):
        hist = [(float(le), n) for (a, p, le), n in buckets.items() if (a, p) == (app, proc)]
        reasons = {k[2]: v for k, v in aborts_now.items() if k[:2] == (app, proc)}
        recent = sum(v for k, v in aborts.items() if k[:2] == (app, proc))
        rows.append(
            ProcedureRow(
                app=app,
                procedure=proc,
                per_s=counts.get((app, proc), 0.0) / dt,
                p50_s=quantile(0.5, hist),
                p99_s=quantile(0.99, hist),
                aborts_per_s=recent / dt,
                aborts_total=sum(reasons.values()),
                top_reason=max(reasons, key=lambda r: reasons[r]) if reasons else "",
            )
        )
    return rows


def apps(before: Samples, after: Samples, dt: float) -> list[AppRow]:
    batches_now = _sum_by(after, "txstream_batches_committed_total", ("app",))
    batches = _delta(_sum_by(before, "txstream_batches_committed_total", ("app",)), batches_now)
    lag = _sum_by(after, "txstream_input_lag_records", ("app",))
    keys = sorted(set(batches_now) | set(lag))
    return [
        AppRow(k[0], batches.get(k, 0.0) / dt, batches_now.get(k, 0.0), lag.get(k, 0.0))
        for k in keys
    ]


def rates(before: Samples, after: Samples, dt: float, name: str, key: str) -> dict[str, float]:
    """Per-second increase of a counter over the interval, summed by one label."""
    delta = _delta(_sum_by(before, name, (key,)), _sum_by(after, name, (key,)))
    return {k[0]: v / dt for k, v in sorted(delta.items())}


def totals(samples: Samples, name: str, key: str) -> dict[str, float]:
    return {k[0]: v for k, v in sorted(_sum_by(samples, name, (key,)).items())}
