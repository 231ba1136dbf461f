"""Ranges for the wheel's users, exact versions for our own installs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[3]


def lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"requirements.lock: {line!r} is not name==version"
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_runtime_dependencies_are_ranges_that_admit_the_locked_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = lock()
    for spec in project["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+),<([0-9.]+)", spec)
        assert m, f"{spec!r}: a range >=low,<high, not a pin"
        name, low, high = re.sub(r"[-_.]+", "-", m[1]).lower(), m[2], m[3]
        assert name in pins, f"{name} is not in requirements.lock"
        version = tuple(map(int, pins[name].split(".")[:3]))
        assert tuple(map(int, low.split("."))) <= version < tuple(map(int, high.split("."))), (
            f"{name} {pins[name]} is outside {spec}"
        )


def test_every_install_is_constrained_by_the_lock() -> None:
    assert "pip install -q -c requirements.lock -e" in (ROOT / "Makefile").read_text()
    for dockerfile in [*ROOT.glob("services/*/Dockerfile"), ROOT / "spark-jobs/Dockerfile"]:
        text = dockerfile.read_text()
        assert "COPY pyproject.toml requirements.lock" in text, dockerfile
        assert "pip install -c requirements.lock -r" in text, dockerfile
