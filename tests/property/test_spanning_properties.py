"""Spanning procedures on random programs against a serial execution in batch order.

Hypothesis draws a partition count, a crash rate, and a sequence of batches; each tuple of a
batch names keys of table `cells` to read and keys to write (spread over every partition by
the routing function), a constant to add, and a threshold above which the batch aborts. The
procedure sums what it reads, writes `sum + add + key` to every write key and emits the sum;
an abort drops the whole batch. `SpanCluster` runs it on P engines with seeded interleaving
and crashes; the reference runs it on one dict, batch after batch, tuple after tuple. Every
engine's committed rows, merged, and the committed outputs must equal the reference's: the
spanning batches are serializable in batch order (PL4), atomic, and exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.simulation.spanning import SpanCluster, broadcast
from txstream.engine.context import TxnContext
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


def build() -> App:
    app = App("cells")
    ops = app.stream("ops", schema="none")
    app.stream("sums", schema="none")
    app.table("cells", schema="none")

    @app.procedure(input=ops, outputs=["sums"], touches=touches)
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


def serial(batches: list[list[Record]]) -> tuple[dict[Any, Record], list[tuple[int, Any]]]:
    """Each batch alone, in order; an aborted batch leaves nothing. Returns the cells and
    the committed batches' (batch id, outputs)."""
    cells: dict[int, int] = {}
    outputs = []
    for batch_id, batch in enumerate(batches, 1):
        state, out = dict(cells), []
        try:
            for t in batch:
                total = sum(state.get(k, 0) for k in t["reads"])
                if 0 <= t["abort_above"] < total:
                    raise StopIteration
                for k in t["writes"]:
                    state[k] = total + t["add"] + k
                out.append({"total": total})
        except StopIteration:
            continue
        cells = state
        outputs.append((batch_id, out))
    return {(k,): {"v": v} for k, v in cells.items()}, outputs


@given(
    batches=BATCHES,
    partitions=st.integers(min_value=1, max_value=4),
    crash_rate=st.sampled_from([0.0, 0.05]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_random_spanning_programs_equal_a_serial_execution(
    batches: list[list[Record]], partitions: int, crash_rate: float, seed: int
) -> None:
    ops = broadcast("ops", batches, partitions)
    cluster = SpanCluster(build(), partitions, [{"ops": ops}], seed)
    cluster.run(crash_rate=crash_rate)
    want_cells, want_outputs = serial(batches)
    assert cluster.tables().get("cells", {}) == want_cells
    assert sorted((o.batch_id, list(o.tuples)) for o in cluster.outputs) == want_outputs
