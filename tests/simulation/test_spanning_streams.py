"""Two spanning streams on the same keys: transfers and refunds between the same accounts
(`bank.refunds`), routed by one producer with one id sequence, on P simulated engines with
random interleavings and crashes. Every run must end (no two batches waiting for each
other across engines: the run fails after its step budget otherwise), and equal running
every batch of either stream alone in batch-id order (computed here, apart from the
engine). `make test` runs 1,000 seeds, `make faults` 5,000.
"""

from __future__ import annotations

import random

import pytest

from bank.refunds import build_app
from tests.support.scale import scaled
from tests.support.simulation.spanning import (
    SpanCluster,
    openings,
    random_transfers,
    routed_together,
)
from txstream.model.declarations import Record

CHUNK = 100  # seeds per test case: a failing case names its first failing seed


def serial(opening: dict[int, int], batches: list[tuple[str, list[Record]]]) -> tuple[
    dict[int, int], dict[tuple[str, int], str]
]:  # fmt: skip
    """Balances and each tuple's outcome after every batch in id order, alone."""
    balances, outcomes = dict(opening), {}
    for stream, batch in batches:
        for t in batch:
            source, target = (t["payer"], t["payee"])
            if stream == "refunds":
                source, target = target, source
            if source not in balances or target not in balances:
                outcome = "no_account"
            elif source == target:
                outcome = "same_account"
            elif balances[source] < t["amount"]:
                outcome = "insufficient_funds"
            else:
                balances[source] -= t["amount"]
                balances[target] += t["amount"]
                outcome = "done"
            outcomes[(stream, t["seq"])] = outcome
    return balances, outcomes


def run_seed(seed: int) -> None:
    rng = random.Random(seed)
    partitions, accounts = rng.randint(2, 4), rng.randint(2, 8)
    opening = {a: rng.randint(0, 100) for a in range(accounts)}
    moves = random_transfers(rng, accounts, rng.randint(2, 40), unknown_payers=True)
    k = rng.choice([1, 2, 4])
    batches = [(rng.choice(["transfers", "refunds"]), moves[i : i + k])
               for i in range(0, len(moves), k)]  # fmt: skip
    app = build_app()
    phases = [{"opens": openings(opening, partitions)},
              dict(routed_together(app, batches, partitions, rng))]  # fmt: skip
    cluster = SpanCluster(app, partitions, phases, seed)
    cluster.run(crash_rate=rng.choice([0.0, 0.03]))
    balances, outcomes = serial(opening, batches)
    where = f"seed {seed}: P={partitions} K={k}, {len(batches)} batches, {cluster.crashes} crashes"
    got = {key[0]: row["balance"] for key, row in cluster.tables()["accounts"].items()}
    assert got == balances, where
    emitted = [(o.stream.split("_")[0] + "s", t["seq"], t["outcome"])
               for o in cluster.outputs for t in o.tuples]  # fmt: skip
    assert len(emitted) == len(moves), f"{where}: each outcome once"
    assert {(s, q): o for s, q, o in emitted} == outcomes, where


def chunks() -> list[range]:
    n = scaled(1_000, 5_000)
    return [range(i, min(n, i + CHUNK)) for i in range(0, n, CHUNK)]


@pytest.mark.parametrize("seeds", chunks(), ids=lambda r: f"{r.start}-{r.stop - 1}")
def test_two_spanning_streams_on_the_same_keys_equal_serial_in_id_order(seeds: range) -> None:
    for seed in seeds:
        run_seed(seed)
