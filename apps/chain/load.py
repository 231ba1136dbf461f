"""Input for the chain: `batches` atomic batches of `batch_size` seeded random tuples on s0."""

from __future__ import annotations

import random

from txstream import App, BatchProducer, Settings


def batch_tuples(batch_id: int, batch_size: int, seed: int) -> list[dict[str, int]]:
    """The tuples of one batch: a pure function of its id, so references can recompute it."""
    rng = random.Random(seed * 1_000_003 + batch_id)
    return [{"key": rng.randrange(1000), "value": rng.randrange(100)} for _ in range(batch_size)]


def load_batches(
    settings: Settings, app: App, batches: int, batch_size: int = 1, seed: int = 1, first: int = 1
) -> int:
    """Produce batches `first`..`first+batches-1` to the app's s0, 10,000 batches to a
    transaction, as a user's producer would (`BatchProducer`); returns the last id."""
    last = first + batches - 1
    with BatchProducer(app, settings) as producer:
        for start in range(first, last + 1, 10_000):
            with producer.transaction():
                for batch_id in range(start, min(start + 10_000, last + 1)):
                    producer.send("s0", batch_tuples(batch_id, batch_size, seed), batch_id)
    return last
