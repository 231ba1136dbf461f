"""Repartitioned edges across simulated engines, with crashes: exactly once, and in order.

Each seed places random order events by customer on P engines, runs `accept` there and
`tally` on the engines owning the items (through its topic), with random interleavings and
crashes, and checks both count tables against the serial reference: a part applied twice
or lost, or a tally on an engine that does not own its item, changes them. On the ordered
edge each item's running totals must also be the serial execution's, which any part taken
out of (batch id, sender) order changes.
"""

from __future__ import annotations

import os
import random

import pytest

from orders.sales import reference
from tests.support.simulation.hops import HopCluster
from txstream.kafka.routing import partition_of
from txstream.model.declarations import Record

SEEDS = 3000 if os.environ.get("TXSTREAM_FAULTS") == "long" else 120


def batches(rng: random.Random, n: int, size: int) -> list[list[Record]]:
    """Orders over few customers, items and order ids (so duplicates happen), some with a
    quantity that is not positive, and a few events that are not orders."""
    events = [
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
    return [events[i : i + size] for i in range(0, n, size)]


def by_item(totals: list[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = {}
    for t in totals:
        out.setdefault(t["item"], []).append(t)
    return out


@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize("ordered", [True, False])
def test_results_equal_the_serial_reference_across_crashes(seed: int, ordered: bool) -> None:
    rng = random.Random(seed)
    partitions = rng.choice([1, 2, 3, 4])
    bs = batches(rng, rng.randrange(1, 80), rng.choice([1, 3, 8]))
    cluster = HopCluster(bs, partitions, seed, ordered)
    cluster.run(crash_rate=rng.choice([0.0, 0.02, 0.1]))
    customers, items, totals = reference(bs, lambda c: partition_of((c,), partitions))
    assert cluster.counts("customer_sales") == customers
    assert cluster.counts("item_sales") == items
    if ordered:
        got = by_item([t for engine in cluster.totals for t in engine])
        assert got == by_item(totals)


@pytest.mark.parametrize("seed", range(40))
def test_each_senders_parts_arrive_in_batch_order(seed: int) -> None:
    rng = random.Random(seed)
    cluster = HopCluster(batches(rng, 60, 2), 4, seed, ordered=False)
    cluster.run(crash_rate=0.05)
    for log in cluster.hop_order():
        for sender in {s for s, _ in log}:
            ids = [b for s, b in log if s == sender]
            assert ids == sorted(set(ids)), f"sender {sender}: {ids}"
