"""The chain micro-benchmark computed serially in plain Python, with no txstream code."""

from __future__ import annotations

from chain.dataflow import BUCKETS
from chain.load import batch_tuples


def chain_totals(
    length: int, batches: int, batch_size: int, seed: int, abort_every: int = 0
) -> dict[tuple[int, int], dict[str, int]]:
    """{(stage, bucket): {"value", "batches"}} after batches 1..`batches`."""
    totals: dict[tuple[int, int], dict[str, int]] = {}
    for b in range(1, batches + 1):
        tuples = batch_tuples(b, batch_size, seed)
        for stage in range(length):
            if stage == 1 and abort_every and b % abort_every == 0:
                break
            for t in tuples:
                row = totals.setdefault((stage, t["key"] % BUCKETS), {"value": 0, "batches": 0})
                row["value"] += t["value"] + stage
                row["batches"] += 1
    return totals
