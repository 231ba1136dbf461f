"""Repartitioned edges across simulated engines, with crashes: exactly once, per-sender order.

Each seed places random order events by customer on P engines, runs `accept` there and
`tally` on the engines owning the items (through its topic), with random interleavings and
crashes, and checks both count tables against the serial reference: a part applied twice
or lost, or a tally on an engine that does not own its item, changes them.
"""

from __future__ import annotations

import os
import random

import pytest

from orders.sales import reference
from tests.simulation.hops import HopCluster
from txstream.model.declarations import Record

SEEDS = 3000 if os.environ.get("TXSTREAM_FAULTS") == "long" else 120


def events(rng: random.Random, n: int) -> list[Record]:
    """Orders over few customers, items and order ids (so duplicates happen), some with a
    quantity that is not positive, and a few events that are not orders."""
    return [
        {
            "seq": i,
            "kind": rng.choice("OOOOOOOR"),
            "order_id": rng.randrange(30),
            "customer": rng.randrange(9),
            "item": rng.randrange(12),
            "amount": rng.randrange(-1, 6),
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("seed", range(SEEDS))
def test_counts_equal_the_serial_reference_across_crashes(seed: int) -> None:
    rng = random.Random(seed)
    evs = events(rng, rng.randrange(1, 80))
    cluster = HopCluster(evs, rng.choice([1, 2, 3, 4]), rng.choice([1, 3, 8]), seed)
    cluster.run(crash_rate=rng.choice([0.0, 0.02, 0.1]))
    customers, items = reference(evs)
    assert cluster.counts("customer_sales") == customers
    assert cluster.counts("item_sales") == items


@pytest.mark.parametrize("seed", range(40))
def test_each_senders_parts_arrive_in_batch_order(seed: int) -> None:
    rng = random.Random(seed)
    cluster = HopCluster(events(rng, 60), 4, 2, seed)
    cluster.run(crash_rate=0.05)
    for log in cluster.hop_order():
        for sender in {s for s, _ in log}:
            ids = [b for s, b in log if s == sender]
            assert ids == sorted(set(ids)), f"sender {sender}: {ids}"
