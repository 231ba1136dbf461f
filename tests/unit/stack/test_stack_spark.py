"""The native stack's Spark cluster components, without starting Spark (the integration
tests in test_stack.py and test_generic_warehouse.py start it)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from txstream.config import Settings
from txstream.stack.stack import Stack
from txstream_etl.pools import SHARES, allocation_file


def names(settings: Settings) -> list[str]:
    return [s.name for s in Stack(settings).status()]


def test_the_cluster_is_part_of_the_stack_only_when_asked_for(tmp_path: Path) -> None:
    assert not [n for n in names(Settings(home=tmp_path)) if n.startswith("spark")]
    spark = [n for n in names(Settings(home=tmp_path, spark_workers=2)) if n.startswith("spark")]
    assert spark == ["spark-master", "spark-worker-1", "spark-worker-2"]


def test_down_stops_workers_a_larger_setting_started(tmp_path: Path) -> None:
    """`up` with three workers, then `down` with the default of none: all three found by
    their pidfiles (here naming no live process, as after a SIGKILL) and cleared."""
    settings = Settings(home=tmp_path)
    settings.run_dir.mkdir(parents=True)
    for name in ("spark-worker-1", "spark-worker-3", "spark-master"):
        (settings.run_dir / f"{name}.pid").write_text("999999999\n")
    said: list[str] = []
    Stack(settings).down(said.append)
    assert "spark-worker-1: not running" in said and "spark-worker-3: not running" in said
    assert "spark-master: not running" in said
    assert not list(settings.run_dir.glob("spark-*.pid"))


def test_the_facts_pools_come_first(tmp_path: Path) -> None:
    pools = {
        p.get("name"): (int(p.findtext("weight") or 0), int(p.findtext("minShare") or 0))
        for p in ET.parse(allocation_file(tmp_path)).getroot()
    }
    assert pools == SHARES
    assert pools["streams"][1] >= 2 and pools["changelog"][1] == 0
