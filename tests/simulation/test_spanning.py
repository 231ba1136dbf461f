"""Spanning procedures across engines: the order pipeline against its serial reference.

Each seed draws a small shop, a partition count and a batch size, interleaves the engines'
deliveries and commits, and crashes engines at random; the result must equal the serial
reference, with every outcome emitted exactly once. `make test` runs a few hundred seeds,
`make faults` thousands.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from orders.files import Shop
from orders.gen import generate
from orders.reference import run as reference
from tests.faults.scale import scaled
from tests.simulation.spanning import OrdersSim


def seeds() -> list[int]:
    fixed = os.environ.get("TXSTREAM_SIM_SEED")
    if fixed:
        return [int(fixed)]
    return list(range(scaled(150, 3_000)))


def shop_for(seed: int, tmp: Path) -> Shop:
    rng = random.Random(seed)
    out = tmp / f"shop{seed}"
    generate(rng.randint(1, 8), rng.randint(1, 8), rng.randint(1, 60), seed, out)
    return Shop.read(out / "items.txt", out / "customers.txt", out / "events.txt")


@pytest.mark.parametrize("seed", seeds())
def test_spanning_equals_serial_reference(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    shop = shop_for(seed, tmp_path)
    partitions, batch_size = rng.choice([1, 2, 3, 4]), rng.choice([1, 2, 5, 100])
    sim = OrdersSim(shop, partitions, batch_size, seed)
    sim.run(crash_rate=rng.choice([0.0, 0.02, 0.1]))
    where = f"seed {seed}: P={partitions} K={batch_size}, {sim.crashes} crashes"
    assert sim.result().to_json() == reference(shop).to_json(), where


def test_an_order_spans_engines(tmp_path: Path) -> None:
    """The exchange is used: with 4 partitions, orders touch keys on several engines."""
    shop = shop_for(7, tmp_path)
    sim = OrdersSim(shop, 4, 1, 7)
    sim.run()
    assert sim.exchanged() > 0
    assert sim.result().to_json() == reference(shop).to_json()
