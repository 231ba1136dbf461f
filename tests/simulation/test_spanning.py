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

from bank.stream_transfers import build_app as build_transfers
from bank.transfer_reference import reference as transfer_reference
from orders.files import Shop
from orders.gen import generate
from orders.reference import run as reference
from tests.support.scale import scaled
from tests.support.simulation.spanning import (
    OrdersSim,
    SpanCluster,
    openings,
    random_transfers,
    routed,
)
from txstream.model.declarations import Isolation, Record


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
    mark_every = rng.choice([None, 1, 3, 1_000])  # None: broadcast
    sim = OrdersSim(shop, partitions, batch_size, seed, mark_every)
    sim.run(crash_rate=rng.choice([0.0, 0.02, 0.1]))
    where = f"seed {seed}: P={partitions} K={batch_size} marks {mark_every}, {sim.crashes} crashes"
    assert sim.result().to_json() == reference(shop).to_json(), where


def test_an_order_spans_engines(tmp_path: Path) -> None:
    """The exchange is used: with 4 partitions, orders touch keys on several engines."""
    shop = shop_for(7, tmp_path)
    sim = OrdersSim(shop, 4, 1, 7)
    sim.run()
    assert sim.exchanged() > 0
    assert sim.result().to_json() == reference(shop).to_json()


def serial_transfers(opening: dict[int, int], transfers: list[Record]) -> dict[int, int]:
    balances = dict(opening)
    for t in transfers:
        payer, payee, amount = t["payer"], t["payee"], t["amount"]
        known = payer in balances and payee in balances and payer != payee
        if known and balances[payer] >= amount:
            balances[payer] -= amount
            balances[payee] += amount
    return balances


@pytest.mark.parametrize("seed", range(scaled(40, 600)))
def test_stream_transfers_conserve_money_and_equal_serial(seed: int) -> None:
    """TSpoon's transfers as a spanning dataflow (`bank.stream_transfers`), with crashes."""
    rng = random.Random(seed)
    partitions, accounts = rng.randint(1, 4), rng.randint(2, 12)
    opening = {a: rng.randint(0, 100) for a in range(accounts)}
    transfers = random_transfers(rng, accounts, rng.randint(1, 80), unknown_payers=True)
    opens = openings(opening, partitions)
    k = rng.choice([1, 3, 50])
    batches = [transfers[i : i + k] for i in range(0, len(transfers), k)]
    app = build_transfers()
    log = routed(app, "transfers", batches, partitions, rng.choice([1, 4]))
    phases = [{"opens": opens}, {"transfers": log}]
    cluster = SpanCluster(app, partitions, phases, seed)
    cluster.run(crash_rate=rng.choice([0.0, 0.05]))
    got = {k[0]: row["balance"] for k, row in cluster.tables()["accounts"].items()}
    assert got == serial_transfers(opening, transfers), f"seed {seed}: P={partitions} K={k}"
    assert sum(got.values()) == sum(opening.values())
    assert sorted(t["seq"] for o in cluster.outputs for t in o.tuples) == list(
        range(len(transfers))
    )


@pytest.mark.parametrize("seed", range(scaled(30, 400)))
def test_stream_transfers_below_pl3_equal_their_epoch_reference(seed: int) -> None:
    """The same transfers at PL2/PL1/PL0 on few, busy accounts, with crashes: outcomes and
    balances equal `bank.transfer_reference` at that level (reads as of each epoch's start),
    across engines, exactly once; moved by formula updates, no money is made or lost."""
    rng = random.Random(seed)
    partitions, accounts = rng.randint(2, 4), rng.randint(2, 6)
    opening = {a: rng.randint(0, 100) for a in range(accounts)}
    transfers = random_transfers(rng, accounts, rng.randint(1, 80))
    k, epoch = rng.choice([1, 2, 5]), rng.choice([1, 3, 8])
    isolation = rng.choice([Isolation.PL2, Isolation.PL1, Isolation.PL0])
    batches = [transfers[i : i + k] for i in range(0, len(transfers), k)]
    formulas = rng.random() < 0.5
    app = build_transfers(isolation=isolation, epoch=epoch, formulas=formulas)
    phases = [
        {"opens": openings(opening, partitions)},
        {"transfers": routed(app, "transfers", batches, partitions, rng.choice([1, 4]))},
    ]
    cluster = SpanCluster(app, partitions, phases, seed)
    cluster.run(crash_rate=rng.choice([0.0, 0.05]))
    outcomes, balances = transfer_reference(opening, batches, isolation, epoch, formulas)
    got = {k[0]: row["balance"] for k, row in cluster.tables()["accounts"].items()}
    where = f"seed {seed}: P={partitions} K={k} {isolation} epoch {epoch} formulas {formulas}"
    assert got == balances, where
    if formulas:
        assert sum(got.values()) == sum(opening.values()), where
    emitted = {t["seq"]: t["outcome"] for o in cluster.outputs for t in o.tuples}
    assert emitted == outcomes, where
    assert sum(len(o.tuples) for o in cluster.outputs) == len(transfers), "each outcome once"
