"""Test helpers: a private real Prometheus scraping a test's services, and the dashboards'
panels evaluated against it through the HTTP API."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable
from typing import Any

from txstream.config import Settings, project_root
from txstream.observability.targets import live_targets
from txstream.stack.prometheus import PrometheusServer

DASHBOARDS = project_root() / "grafana" / "dashboards"
Expr = tuple[str, str, str]  # (dashboard file, panel title, PromQL)


def api(prometheus: PrometheusServer, path: str, **params: Any) -> list[dict[str, Any]]:
    """A Prometheus HTTP API query; its result (vector or matrix)."""
    url = f"{prometheus.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def addresses(settings: Settings) -> set[str]:
    return {t.address for t in live_targets(settings)}


def wait_until_scraped(
    prometheus: PrometheusServer, targets: set[str], after: float, samples: int = 1
) -> None:
    """Until Prometheus holds `samples` samples of every target taken at or after `after`.

    Prometheus applies newly discovered targets only every few seconds, and a panel shows
    only what happened while its service was scraped."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        recent = api(prometheus, "query", query="up[1m]")
        counts = {s["metric"]["instance"]: sum(float(t) >= after for t, _ in s["values"])
                  for s in recent}  # fmt: skip
        if all(counts.get(a, 0) >= samples for a in targets):
            return
        time.sleep(0.5)  # poll interval
    raise AssertionError(f"Prometheus did not scrape {sorted(targets)} {samples} times")


def wait_until_serving(
    settings: Settings, prometheus: PrometheusServer, jobs: dict[str, int], timeout_s: float = 120
) -> None:
    """Until the services have registered (`jobs`: how many of each) and Prometheus scrapes
    them, so the workload that follows is seen from its start."""
    deadline = time.monotonic() + timeout_s
    while True:
        registered = Counter(t.job for t in live_targets(settings))
        if all(registered[job] >= n for job, n in jobs.items()):
            break
        assert time.monotonic() < deadline, f"services {jobs} did not register: {registered}"
        time.sleep(0.2)  # poll interval
    wait_until_scraped(prometheus, addresses(settings), after=0.0)


def panel_exprs(keep: Callable[[str], bool]) -> list[Expr]:
    """Every target of every panel whose expression `keep` accepts."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                if keep(target["expr"]):
                    found.append((path.name, panel["title"], as_grafana_sends(target["expr"])))
    return found


def as_grafana_sends(expr: str) -> str:
    """The query Grafana sends for `expr` with every variable at "All" (`.*`) and a rate
    interval of a minute (four scrapes or more, as Grafana works it out)."""
    return (
        expr.replace("$__rate_interval", "1m")
        .replace('"$app"', '".*"')
        .replace('"$instance"', '".*"')
    )


def panels_without_data(
    prometheus: PrometheusServer, settings: Settings, exprs: list[Expr], began: float
) -> list[str]:
    """The expressions that return no number, over the run or at its end, once every target
    has been scraped twice since the work ended (rate() needs two samples)."""
    wait_until_scraped(prometheus, addresses(settings), time.time(), samples=2)
    missing = []
    for dashboard, title, expr in exprs:
        window = {"start": began - 5, "end": time.time(), "step": 1.0}
        over_run = api(prometheus, "query_range", query=expr, **window)
        at_end = [{"values": [s["value"]]} for s in api(prometheus, "query", query=expr)]
        if not (_has_data(over_run) or _has_data(at_end)):
            missing.append(f"{dashboard} / {title}: {expr}")
    return missing


def _has_data(result: list[dict[str, Any]]) -> bool:
    """Some series has some sample that is a number (histogram_quantile over no increase is
    NaN, which is not data)."""
    return any(v != "NaN" for series in result for _, v in series["values"])
