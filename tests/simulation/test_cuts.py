"""Snapshot and serializable queries across engines read one consistent cut of the
spanning batches.

TSpoon's transfers run as a spanning dataflow on P engines, with crashes, while a client
reads the accounts through the coordinator's protocol. Every snapshot or serializable answer
must be the serial execution's balances right after the batch it names, on every engine;
read committed answers, taken from each engine as it stands, are not (the last test shows
the check catches that).
"""

from __future__ import annotations

import random

import pytest

from bank.stream_transfers import build_app as build_transfers
from tests.simulation.test_spanning import serial_transfers
from tests.support.scale import scaled
from tests.support.simulation.cuts import QueryCluster
from tests.support.simulation.spanning import broadcast, openings, random_transfers
from txstream.model.declarations import Record
from txstream.oltp.messages import Query


def run(
    seed: int, isolation: str, crashes: bool
) -> tuple[QueryCluster, list[list[Record]], dict[int, int]]:
    rng = random.Random(seed)
    partitions, accounts = rng.randint(2, 4), rng.randint(2, 10)
    opening = {a: rng.randint(0, 100) for a in range(accounts)}
    transfers = random_transfers(rng, accounts, rng.randint(20, 80))
    opens = openings(opening, partitions)
    k = rng.choice([1, 3])
    batches = [transfers[i : i + k] for i in range(0, len(transfers), k)]
    phases = [{"opens": opens}, {"transfers": broadcast("transfers", batches, partitions)}]
    query = Query("accounts", isolation)
    cluster = QueryCluster(build_transfers(), partitions, phases, seed, query, "transfers")
    cluster.run(crash_rate=0.02 if crashes else 0.0)
    cluster.finish()
    return cluster, batches, opening


def balances_after(opening: dict[int, int], batches: list[list[Record]], at: int) -> dict[int, int]:
    return serial_transfers(opening, [t for b in batches[: max(at, 0)] for t in b])


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
@pytest.mark.parametrize("seed", range(scaled(40, 600)))
def test_cut_answers_are_the_serial_state_after_the_batch_they_name(
    seed: int, isolation: str
) -> None:
    crashes = seed % 2 == 1
    cluster, batches, opening = run(seed, isolation, crashes)
    answered = cluster.answered()
    where = f"seed {seed}, {cluster.crashes} crashes"
    if not crashes:
        assert len(answered) == cluster.asked > 0, where  # every query is answered
    for at, rows in answered:
        assert at is not None, where
        got = {k[0]: row["balance"] for k, row in rows}
        assert got == balances_after(opening, batches, at), f"{where}: as of batch {at}"
    failed = {r.reason for r in cluster.results if not r.ok}
    assert failed <= {"too_old"}, where  # only after crashes: a restart past the cut, thrice


def test_read_committed_answers_can_mix_batches_and_the_check_sees_it() -> None:
    """Without the cut, some answers match no serial state at all (one engine has run a
    transfer its partner has not): the comparison above would catch a broken cut."""
    mixed = 0
    for seed in range(20):
        cluster, batches, opening = run(seed, "read_committed", crashes=False)
        states = [balances_after(opening, batches, b) for b in range(len(batches) + 1)]
        for _, rows in cluster.answered():
            got = {k[0]: row["balance"] for k, row in rows}
            mixed += got not in states
    assert mixed > 0
