"""Spanning batches reach, and are run by, only the engines owning one of their keys.

With the events routed (`routed`: each batch to the partitions it touches, progress marks
to the rest), the order pipeline still equals its serial reference, each engine is handed
exactly the batches that touch it, and an engine's share of the work falls as 1/P: an
order declares three keys, so a batch of one event runs on at most three engines however
many there are. The figures are printed (`-s`) and quoted in docs/partitioning.md.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from orders.files import Shop
from orders.gen import generate
from orders.loader import event_batches
from orders.reference import run as reference
from tests.support.simulation.spanning import OrdersSim, touched


def _shop(tmp: Path, items: int, customers: int, events: int, seed: int) -> Shop:
    out = tmp / f"shop{seed}"
    generate(items, customers, events, seed, out)
    return Shop.read(out / "items.txt", out / "customers.txt", out / "events.txt")


@pytest.mark.parametrize("seed", range(6))
def test_each_engine_is_handed_only_the_batches_that_touch_it(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    shop = _shop(tmp_path, 40, 40, 120, seed)
    partitions, k = rng.choice([4, 6]), rng.choice([1, 2])
    sim = OrdersSim(shop, partitions, k, seed, mark_every=rng.choice([1, 5]))
    sim.run(crash_rate=0.02)
    assert sim.result().to_json() == reference(shop).to_json()
    batches = event_batches(shop, k)
    handed = 0
    for p in range(partitions):
        # every delivery (repeats after a crash included) is of a batch touching p
        got = {b for topic, b in sim.delivered[p] if topic == "events"}
        want = {
            b for b, t in enumerate(batches, 1) if p in touched(sim.app, "events", t, partitions)
        }
        assert got == want, f"engine {p} of {partitions}"
        handed += len(got)
    assert handed < partitions * len(batches)  # what broadcasting would hand them


def test_work_per_engine_falls_as_one_over_p(tmp_path: Path) -> None:
    """Batches of one event (at most three keys) on P = 4, 16, 64 engines: the batches an
    engine runs, per batch of the input, stay within 3/P on average and 6/P at most."""
    shop = _shop(tmp_path, 600, 600, 1_500, 11)
    batches = len(event_batches(shop, 1))
    shares = {}
    for partitions in (4, 16, 64):
        sim = OrdersSim(shop, partitions, 1, 11, mark_every=50)
        sim.run(max_steps=5_000_000)
        assert sim.result().to_json() == reference(shop).to_json(), f"P={partitions}"
        mean = sum(sim.ran) / partitions / batches
        worst = max(sim.ran) / batches
        shares[partitions] = (mean, worst)
        print(f"P={partitions}: an engine runs {mean:.3f} of the batches on average, "
              f"{worst:.3f} at most (3/P = {3 / partitions:.3f})")  # fmt: skip
        assert mean <= 3 / partitions, f"P={partitions}"
        assert worst <= 6 / partitions, f"P={partitions}"
    assert shares[64][0] < shares[16][0] < shares[4][0]
