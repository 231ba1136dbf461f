"""A chain of `length` procedures sp1..spN over streams s0..s(N-1), fused by PE triggers.

Each TE adds its batch to a running total per key bucket and passes the tuples on, so every
stage both writes state and feeds the next one: the shape S-Store's recovery figures use.
With `abort_every` > 0, sp2 aborts on every batch id divisible by it, so the chain stops
there for that batch (deterministically, as replay requires).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from txstream import App, Record, Stream, Table, TxnContext

BUCKETS = 16


class Item(TypedDict):
    """One tuple of the PE-trigger chain micro-benchmark."""

    key: int
    value: int


class Total(TypedDict):
    """A running sum kept by one stage of the chain, per key bucket."""

    value: int
    batches: int


def build_app(
    length: int, name: str = "chain", recovery: str = "changelog", abort_every: int = 0
) -> App:
    if length < 1:
        raise ValueError(f"a chain needs at least one procedure, not {length}")
    app = App(name, params={"length": length, "abort_every": abort_every}, recovery=recovery,
              namespace="chain")  # fmt: skip
    streams = [app.stream(f"s{i}", schema=Item, key_field="key") for i in range(length)]
    totals = app.table("totals", schema=Total)
    for i in range(length):
        after = streams[i + 1] if i + 1 < length else None
        app.procedure(input=streams[i], outputs=[after] if after else [], name=f"sp{i + 1}")(
            _stage(i, totals, after, abort_every)
        )
    return app


def _stage(
    i: int, totals: Table, after: Stream | None, abort_every: int
) -> Callable[[TxnContext, Sequence[Record]], None]:
    """Stage i: add each tuple to its bucket's total, and pass it on to `after`."""

    def run(ctx: TxnContext, batch: Sequence[Record]) -> None:
        if i == 1 and abort_every and ctx.batch_id % abort_every == 0:
            ctx.abort("chain_test", f"sp2 aborts batch {ctx.batch_id}")
        rows = ctx.table(totals)
        for tup in batch:
            key = (i, tup["key"] % BUCKETS)
            row = rows.get(key) or {"value": 0, "batches": 0}
            rows.put(key, {"value": row["value"] + tup["value"], "batches": row["batches"] + 1})
            if after is not None:
                ctx.emit(after, {"key": tup["key"], "value": tup["value"] + 1})

    return run


def from_params(values: dict[str, Any]) -> App:
    """The worker's factory (`--app chain.dataflow:from_params`)."""
    return build_app(
        int(values.get("length", 3)),
        name=str(values.get("name", "chain")),
        recovery=str(values.get("recovery", "changelog")),
        abort_every=int(values.get("abort_every", 0)),
    )
