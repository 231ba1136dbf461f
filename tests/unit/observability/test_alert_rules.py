"""The alert rules, checked and unit-tested by Prometheus's own `promtool`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from txstream.observability.alerts import RULES

CASES = Path(__file__).parents[2] / "alerts" / "alerts_test.yml"


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: `make setup` installs Debian's prometheus package")
    return found


def test_the_rules_are_valid(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 rules found" in done.stdout + done.stderr


def test_each_alert_fires_when_it_should_and_only_then(promtool: str, tmp_path: Path) -> None:
    cases = tmp_path / "alerts_test.yml"
    cases.write_text(CASES.read_text().replace("RULES", str(RULES)))
    done = subprocess.run([promtool, "test", "rules", str(cases)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
