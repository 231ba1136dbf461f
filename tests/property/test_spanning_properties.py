"""Spanning procedures on random programs against a serial execution in batch order.

Hypothesis draws a partition count, a crash rate, and a sequence of batches; each tuple of a
batch names keys of table `cells` to read and keys to write (spread over every partition by
the routing function), a constant to add, and a threshold above which the batch aborts. The
procedure sums what it reads, writes `sum + add + key` to every write key and emits the sum;
an abort drops the whole batch. `SpanCluster` runs it on P engines with seeded interleaving
and crashes; the reference runs it on one dict, batch after batch, tuple after tuple. Every
engine's committed rows, merged, and the committed outputs must equal the reference's: the
spanning batches are serializable in batch order (PL4), atomic, and exactly once.

Below PL3 (`engine.epochs`) the reference is the same execution with every batch reading as
of its epoch's start; and where no batch read a value an earlier batch of its epoch had
changed, that equals the serial one: stale reads are the only difference the levels allow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.simulation.spanning import SpanCluster, broadcast
from txstream import TxnContext
from txstream.model.app import App
from txstream.model.declarations import Record

KEYS = st.integers(min_value=0, max_value=11)
TUPLES = st.fixed_dictionaries(
    {
        "reads": st.lists(KEYS, max_size=3, unique=True),
        "writes": st.lists(KEYS, max_size=3, unique=True),
        "add": st.integers(min_value=-5, max_value=5),
        "abort_above": st.one_of(st.just(-1), st.integers(min_value=0, max_value=60)),
    }
)
BATCHES = st.lists(st.lists(TUPLES, min_size=1, max_size=4), min_size=1, max_size=10)


def touches(t: Record) -> list[tuple[str, int]]:
    return [("cells", k) for k in {*t["reads"], *t["writes"]}]


# (level, epoch size): PL4 and PL3 run in batch order; PL2-PL0 over epochs of batch ids.
LEVELS = st.sampled_from(
    [("PL4", 16), ("PL3", 16), ("PL2", 1), ("PL2", 2), ("PL1", 3), ("PL0", 50)]
)


def build(isolation: str = "PL4", epoch: int = 16) -> App:
    app = App("cells")
    ops = app.stream("ops", schema="none")
    app.stream("sums", schema="none")
    app.table("cells", schema="none")

    @app.procedure(input=ops, outputs=["sums"], touches=touches, isolation=isolation, epoch=epoch)
    def apply(ctx: TxnContext, batch: Sequence[Record]) -> None:
        cells = ctx.table("cells")
        for t in batch:
            total = sum((cells.get(k) or {"v": 0})["v"] for k in t["reads"])
            if 0 <= t["abort_above"] < total:
                ctx.abort("over", f"{total} > {t['abort_above']}")
            for k in t["writes"]:
                cells.put(k, {"v": total + t["add"] + k})
            ctx.emit("sums", {"total": total})

    return app


Cells = dict[Any, Record]
Outputs = list[tuple[int, Any]]


def execute(batches: list[list[Record]], epoch: int | None) -> tuple[Cells, Outputs, bool]:
    """Each batch alone, in batch order; an aborted batch leaves nothing. With `epoch`,
    each batch reads every key as of its epoch's start (its own writes excepted). Returns
    the cells, the committed batches' (batch id, outputs), and whether any read saw a value
    other than a serial execution's at that point (a stale read)."""
    cells: dict[int, int] = {}
    start, at, stale = cells, None, False
    outputs = []
    for batch_id, batch in enumerate(batches, 1):
        if epoch is not None and batch_id // epoch != at:
            start, at = dict(cells), batch_id // epoch
        now, seen, out = dict(cells), dict(start if epoch is not None else cells), []
        try:
            for t in batch:
                total = sum(seen.get(k, 0) for k in t["reads"])
                stale = stale or any(seen.get(k, 0) != now.get(k, 0) for k in t["reads"])
                if 0 <= t["abort_above"] < total:
                    raise StopIteration
                for k in t["writes"]:
                    seen[k] = now[k] = total + t["add"] + k
                out.append({"total": total})
        except StopIteration:
            continue
        cells = now
        outputs.append((batch_id, out))
    return {(k,): {"v": v} for k, v in cells.items()}, outputs, stale


@given(
    batches=BATCHES,
    partitions=st.integers(min_value=1, max_value=4),
    crash_rate=st.sampled_from([0.0, 0.05]),
    seed=st.integers(min_value=0, max_value=2**16),
    level=LEVELS,
)
def test_random_spanning_programs_equal_their_level_reference(
    batches: list[list[Record]],
    partitions: int,
    crash_rate: float,
    seed: int,
    level: tuple[str, int],
) -> None:
    isolation, epoch = level
    ops = broadcast("ops", batches, partitions)
    cluster = SpanCluster(build(isolation, epoch), partitions, [{"ops": ops}], seed)
    cluster.run(crash_rate=crash_rate)
    epochs = isolation in ("PL0", "PL1", "PL2")
    want_cells, want_outputs, stale = execute(batches, epoch if epochs else None)
    assert cluster.tables().get("cells", {}) == want_cells
    assert sorted((o.batch_id, list(o.tuples)) for o in cluster.outputs) == want_outputs
    assert cluster.misplaced() == []
    if not stale:  # no batch read past its epoch's start: the same as serial
        assert (want_cells, want_outputs) == execute(batches, None)[:2]


def lost_update(isolation: str) -> Cells:
    """Two batches of one epoch (ids 2 and 3 of size 4) each add 1 to cell 1."""
    bump = {"reads": [1], "writes": [1], "add": 0, "abort_above": -1}
    batches = [[{"reads": [], "writes": [], "add": 0, "abort_above": -1}], [bump], [bump]]
    cluster = SpanCluster(build(isolation, 4), 2, [{"ops": broadcast("ops", batches, 2)}], 1)
    cluster.run()
    return cluster.tables()["cells"]


@pytest.mark.parametrize(("isolation", "want"), [("PL4", 2), ("PL3", 2), ("PL2", 1), ("PL0", 1)])
def test_below_pl3_batches_of_one_epoch_do_not_see_each_other(isolation: str, want: int) -> None:
    """Cell 1 holds 0 + 1, then (serially) 1 + 1: the second batch of the epoch reads the
    epoch's start, 0, and writes 1 again (read committed's lost update)."""
    assert lost_update(isolation) == {(1,): {"v": want}}
