"""The dashboards' JSON: what Grafana needs to load them, and names that really exist.

Whether each panel shows data is tested against a real Prometheus in
tests/integration/test_dashboards.py; this checks what that cannot: structure, the
datasource every panel names, units, layout, and that each metric an expression uses is one
our services define (a typo there would only show as an empty panel).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

import txstream.observability.metrics  # noqa: F401  (registers the engine metrics)
import txstream_coordinator.metrics  # noqa: F401
import txstream_sequencer.metrics  # noqa: F401
from txstream.config import project_root

GRAFANA = project_root() / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
UNITS = {"s", "ms", "ops", "short", "none", "percentunit", "bytes"}


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def datasource_uid() -> str:
    text = (GRAFANA / "provisioning/datasources/prometheus.yml").read_text()
    (uid,) = re.findall(r"^\s*uid:\s*(\S+)\s*$", text, re.MULTILINE)
    return str(uid)


def defined_metrics() -> set[str]:
    """Every sample name our processes can serve (histograms as _bucket/_count/_sum)."""
    names = set()
    for family in REGISTRY.collect():
        names |= {family.name, f"{family.name}_total", f"{family.name}_bucket"}
        names |= {f"{family.name}_count", f"{family.name}_sum"}
    return names


def test_the_four_dashboards_exist_with_unique_uids() -> None:
    names = {p.stem for p in DASHBOARDS}
    assert {"overview", "dataflow", "transactions", "etl"} <= names
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids), uids


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_panels_are_well_formed(path: Path) -> None:
    doc = load(path)
    assert doc["title"] and doc["panels"], path
    uid = datasource_uid()
    ids = [p["id"] for p in doc["panels"]]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids), ids
    for panel in doc["panels"]:
        where = f"{path.name} / {panel['title']}"
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, where
        assert panel["fieldConfig"]["defaults"]["unit"] in UNITS, where
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, where
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(set(refs)) == len(refs), where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == uid, where
            assert target["expr"].strip(), where


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_metric_an_expression_names_is_defined(path: Path) -> None:
    defined = defined_metrics() | etl_metrics()
    for panel in load(path)["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"txstream_[a-z0-9_]+", target["expr"]):
                assert name in defined, f"{path.name} / {panel['title']}: no metric {name}"


def etl_metrics() -> set[str]:
    """The ETL job's metric names, read from its source (it runs under Spark's Python)."""
    source = (project_root() / "spark-jobs").rglob("*.py")
    found = set()
    for path in source:
        for name in re.findall(r"\"(txstream_etl_[a-z_]+)\"", path.read_text()):
            base = name.removesuffix("_total")
            found |= {base, f"{base}_total", f"{base}_bucket", f"{base}_count", f"{base}_sum"}
    return found


APP_LABELLED = re.compile(r"txstream_(?!coordinator_|sequencer_|etl_)[a-z0-9_]+")


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_selector_follows_the_variables_and_the_rate_interval(path: Path) -> None:
    """An `instance` variable on every dashboard and an `app` one wherever a metric has that
    label, both defaulting to all; every metric filtered by them; no fixed rate window."""
    doc = load(path)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert "instance" in variables, path.name
    for v in variables.values():
        assert v["type"] == "query" and v["includeAll"] and v["allValue"] == ".*", v
        assert v["datasource"]["uid"] == datasource_uid(), v
    for panel in doc["panels"]:
        for target in panel["targets"]:
            expr, where = target["expr"], f"{path.name} / {panel['title']}"
            assert "[1m]" not in expr, f"{where}: use [$__rate_interval]: {expr}"
            for name, selector in re.findall(r"\b(up|txstream_[a-z0-9_]+)\b(\{[^}]*\})?", expr):
                assert 'instance=~"$instance"' in selector, f"{where}: {name} unfiltered"
                if APP_LABELLED.fullmatch(name):
                    assert "app" in variables, f"{where}: no app variable for {name}"
                    assert 'app=~"$app"' in selector, f"{where}: {name} not filtered by app"
