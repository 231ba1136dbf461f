"""A seeded order-pipeline data set: `python -m orders.gen --out DIR`.

The mix reaches every outcome: a few unknown ids, zero and negative quantities, reused
order ids, stock and balances low enough that some orders run out of either, and restocks
and top-ups (some invalid) interleaved with the orders.
"""

from __future__ import annotations

import random
from pathlib import Path

import typer


def generate(items: int, customers: int, events: int, seed: int, out: Path) -> None:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "items.txt").open("w") as f:
        for i in range(items):
            f.write(f"{i} {rng.randint(1, 500)} {rng.randint(0, 40)}\n")
    with (out / "customers.txt").open("w") as f:
        for c in range(customers):
            f.write(f"{c} {rng.randint(0, 20_000)}\n")
    next_order = 0
    with (out / "events.txt").open("w") as f:
        for _ in range(events):
            roll = rng.random()
            if roll < 0.10:
                f.write(f"R {_id(rng, items)} {rng.randint(-2, 30)}\n")
            elif roll < 0.20:
                f.write(f"T {_id(rng, customers)} {rng.randint(-100, 5_000)}\n")
            else:
                reuse = next_order and rng.random() < 0.02
                order_id = rng.randrange(next_order) if reuse else next_order
                next_order = max(next_order, order_id + 1)
                customer, item = _id(rng, customers), _id(rng, items)
                qty = rng.randint(-1, 0) if rng.random() < 0.02 else rng.randint(1, 6)
                f.write(f"O {order_id} {customer} {item} {qty}\n")


def _id(rng: random.Random, count: int) -> int:
    """Mostly a known id; one in a hundred is `count`, which is unknown."""
    return count if rng.random() < 0.01 else rng.randrange(count)


def main(
    items: int = typer.Option(50, help="items in the catalogue"),
    customers: int = typer.Option(200, help="customers with an account"),
    events: int = typer.Option(10_000, help="event lines"),
    seed: int = typer.Option(1, help="random seed"),
    out: Path = typer.Option(..., help="directory for items.txt, customers.txt, events.txt"),
) -> None:
    """Write a data set; ids one past the last are unknown on purpose."""
    generate(items, customers, events, seed, out)


if __name__ == "__main__":
    typer.run(main)
