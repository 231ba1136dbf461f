"""Per-partition batches interleaved with spanning batches, with crashes: a known bug.

A spanning batch's reads go out at once, outside the engine's transaction, on the grounds
that they are a function of the input before the batch. But a per-partition TE that ran
just before it (here `open_accounts`), not yet committed, is in those reads; after a crash
the two topics may be read again in the other order, the engine's own run of the batch
sees other values than the ones the other engines were sent, and money is made or lost.
Without crashes, or with the openings committed before the transfers (every other spanning
simulation), it never shows. (Seen: 21 of 100 seeds make or lose money; in 20 of them a
restarted engine re-sent reads for a batch that differ from the ones it sent before.)
Kept as a strict xfail: it fails today, and the fix will turn it into a pass. Holding each
kind of input while the other kind's work is uncommitted is not enough (tried: 19 of 100
still fail): after the crash the restarted engine may take a per-partition record before
re-running a spanning batch whose reads it had already sent. The order it externalized must
be kept: reads sent inside the transaction (a commit per exchange), or a restart that first
re-runs every spanning batch it had sent reads for (found on the exchange topic).
"""

from __future__ import annotations

import random

import pytest

from bank.stream_transfers import build_app
from tests.simulation.spanning import SpanCluster, broadcast, openings, random_transfers


def lost_or_made(seed: int, crash_rate: float) -> int:
    """Money made (+) or lost by one seeded run: openings and transfers in one phase."""
    rng = random.Random(seed)
    partitions, accounts = rng.randint(2, 4), rng.randint(2, 8)
    opening = {a: rng.randint(0, 100) for a in range(accounts)}
    transfers = random_transfers(rng, accounts, rng.randint(1, 60))
    k = rng.choice([1, 3])
    batches = [transfers[i : i + k] for i in range(0, len(transfers), k)]
    phase = {
        "opens": openings(opening, partitions),
        "transfers": broadcast("transfers", batches, partitions),
    }
    cluster = SpanCluster(build_app(), partitions, [phase], seed)
    cluster.run(crash_rate=crash_rate)
    balances: list[int] = [r["balance"] for r in cluster.tables()["accounts"].values()]
    return sum(balances) - sum(opening.values())


def test_interleaved_without_crashes_conserve_money() -> None:
    assert [s for s in range(100) if lost_or_made(s, 0.0)] == []


@pytest.mark.xfail(strict=True, reason="known: per-partition work in a spanning batch's reads")
def test_interleaved_with_crashes_conserve_money() -> None:
    assert [s for s in range(100) if lost_or_made(s, 0.08)] == []
