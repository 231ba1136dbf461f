"""The deterministic simulation (`harness`), one test per seed.

`make test` runs a few hundred seeds, `make faults` (TXSTREAM_FAULTS=long) ten thousand;
TXSTREAM_SIM_SEEDS=<n> runs seeds 0..n-1, and TXSTREAM_SIM_SEED=<seed> exactly one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.scale import scaled
from tests.support.simulation.harness import Simulation
from txstream.config import Settings


def seeds() -> list[int]:
    fixed = os.environ.get("TXSTREAM_SIM_SEED")
    if fixed:
        return [int(fixed)]
    return list(range(int(os.environ.get("TXSTREAM_SIM_SEEDS", scaled(300, 10_000)))))


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home: Path = tmp_path_factory.mktemp("sim")
    return Settings(home=home)


@pytest.mark.parametrize("seed", seeds())
def test_simulation(seed: int, settings: Settings) -> None:
    sim = Simulation(seed, settings)
    try:
        sim.run()
        sim.check()
    except AssertionError as e:
        raise AssertionError(
            f"seed {seed} (nested={sim.nested}, crashes at {sim.crashes}): {e}\n"
            f"rerun it alone: TXSTREAM_SIM_SEED={seed} .venv/bin/pytest -q tests/simulation"
        ) from e
