"""A promise decided while a spanning batch that read its row is queued, no Kafka.

Every participant of a spanning batch runs it on the same reads, so each must see the row
it sent as it sent it. A committed promise that landed on that row between the batch's
reads going out and its run would make the owner run on the landed row and the others on
the row as it was: the engines decide differently, and one commits writes the others do not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

import pytest

from tests.support.fakes import MemoryBase, send
from txstream import App, Record, TxnContext
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.spanning import Reads
from txstream.kafka.routing import partition_of
from txstream.oltp.messages import Decision, Fragment

PARTITIONS = 2
BOUND = "sum(qty) >= 0 group by item"


class Units(TypedDict):
    item: int
    site: int
    n: int


def stock_app() -> App:
    app = App("counts")
    app.table("stock", schema="x.Stock", key=("item", "site"), aggregates=[BOUND])
    counts = app.stream("counts", schema="x.Count")
    outcomes = app.stream("outcomes", schema="x.Outcome")

    @app.transaction(params=Units)
    def restock(ctx: TxnContext, params: Record) -> int:
        key = (params["item"], params["site"])
        return int(ctx.table("stock").add(key, {"qty": params["n"]})["qty"])

    def touches(t: Record) -> list[tuple[str, Any]]:
        return [("stock", (t["item"], t["a"])), ("stock", (t["item"], t["b"]))]

    @app.procedure(input=counts, outputs=[outcomes], touches=touches)
    def count(ctx: TxnContext, batch: Sequence[Record]) -> None:
        """One audit more at both sites if the first holds `n` units."""
        stock = ctx.table("stock")
        for t in batch:
            keys = [(t["item"], t["a"]), (t["item"], t["b"])]
            rows = [stock.get(k) for k in keys]
            counted = all(rows) and rows[0]["qty"] >= t["n"]  # type: ignore[index]
            if counted:
                for k, row in zip(keys, rows, strict=True):
                    stock.put(k, {**row, "audits": row["audits"] + 1})  # type: ignore[dict-item,index]
            ctx.emit("outcomes", {"seq": t["seq"], "outcome": "counted" if counted else "short"})

    return app


def owner(key: Any) -> int:
    return partition_of(key, PARTITIONS)


def two_sites() -> tuple[tuple[int, int], tuple[int, int]]:
    """Two sites of item 1 on different engines."""
    a = (1, 0)
    b = next((1, s) for s in range(1, 100) if owner((1, s)) != owner(a))
    return a, b


def engines(rows: Sequence[tuple[int, int]]) -> list[tuple[PartitionEngine, MemoryBase]]:
    df = stock_app().dataflow()
    out = []
    for p in range(PARTITIONS):
        base = MemoryBase()
        engine = PartitionEngine(df, base, p, {}, owner=owner, partitions=PARTITIONS)
        engine.load()
        for item, site in rows:
            if owner((item, site)) == p:
                row = {"item": item, "site": site, "qty": 0, "audits": 0}
                engine.group.ws.put("stock", (item, site), row)
        base.apply(engine.take_group())
        out.append((engine, base))
    return out


Exchange = dict[int, list[tuple[Reads, int]]]  # engine -> the reads on its partition


def exchange(
    nodes: list[tuple[PartitionEngine, MemoryBase]], topic: Exchange, to: set[int] | None = None
) -> None:
    """Every read sent, written to the exchange topic, and read by its receiver (of `to`,
    if given: the others have yet to read it)."""
    for engine, _ in nodes:
        for q, reads in engine.spans.outbox:
            log = topic.setdefault(q, [])
            log.append((reads, len(log)))
            if to is None or q in to:
                nodes[q][0].spans.receive(reads, ("exchange", q, len(log) - 1))
        engine.spans.outbox.clear()


def test_a_promise_decided_while_a_batch_that_read_its_row_is_queued_lands_after_it() -> None:
    a, b = two_sites()
    nodes = engines([a, b])
    mine, _ = nodes[owner(a)]
    promise = send(mine, "promise", "p", Fragment.call(a, "restock", item=1, site=a[1], n=5))
    assert promise.ok, promise
    base_of = {p: base for p, (_, base) in enumerate(nodes)}
    for engine, base in nodes:  # the promise's execution committed; the batch comes after
        base.apply(engine.take_group())
    tuples = [{"seq": 0, "item": 1, "a": a[1], "b": b[1], "n": 1}]
    for p, (engine, _) in enumerate(nodes):
        engine.process("counts", 1, [dict(t) for t in tuples], ("counts", p, 0))
    # the reads of a (qty 0) are out; now SERIALIZE commits the promise on a's engine
    mine.decide(Decision(promise.txn_id, 0, True))
    exchange(nodes, {})
    outputs = []
    for p, (engine, base) in enumerate(nodes):
        assert not engine.spans.queue, f"engine {p} still waits"
        group = engine.take_group()
        outputs += [t for out in group.outputs for t in out.tuples]
        base.apply(group)
    assert outputs == [{"seq": 0, "outcome": "short"}], "it read qty 0, as sent"
    row_a = base_of[owner(a)].tables["stock"][a]
    row_b = base_of[owner(b)].tables["stock"][b]
    assert (row_a["audits"], row_b["audits"]) == (0, 0), "both engines ran it alike"
    assert row_a["qty"] == 5, "the promise landed after the batch"


def restarted(nodes: list[tuple[PartitionEngine, MemoryBase]], p: int) -> PartitionEngine:
    """Engine `p` again over its committed state, as a task opens it: built, loaded, and
    told the spanning input's end now (one batch), which it must reach before other input."""
    _, base = nodes[p]
    engine = PartitionEngine(
        stock_app().dataflow(), base, p, {}, owner=owner, partitions=PARTITIONS
    )
    engine.load()
    engine.spans.catch_up("counts", 1)
    nodes[p] = (engine, base)
    return engine


@pytest.mark.parametrize("decided", ["before the crash", "while catching up"])
def test_after_a_restart_a_promise_lands_after_the_batches_whose_reads_went_out(
    decided: str,
) -> None:
    """The owner of a sent a's value (qty 0) for a batch, then crashed before the batch
    ran. The promise on a, committed before the crash (waiting to land) or decided while
    the restarted engine reads its spanning backlog again, must not land before the batch
    runs again: the others hold the reads sent before the crash, and drop the new ones."""
    a, b = two_sites()
    nodes = engines([a, b])
    pa = owner(a)
    mine, base = nodes[pa]
    promise = send(mine, "promise", "p", Fragment.call(a, "restock", item=1, site=a[1], n=5))
    base.apply(mine.take_group())
    tuples = [{"seq": 0, "item": 1, "a": a[1], "b": b[1], "n": 1}]
    for p, (engine, _) in enumerate(nodes):
        engine.process("counts", 1, [dict(t) for t in tuples], ("counts", p, 0))
    sent = [dict(reads.rows) for _, reads in mine.spans.outbox]  # as encoded when sent
    topic: Exchange = {}
    # the other engine reads a's value as it was sent; a's owner crashes before it reads
    exchange(nodes, topic, to={owner(b)})
    decision = Decision(promise.txn_id, 0, True)
    if decided == "before the crash":
        mine.decide(decision)
        base.apply(mine.take_group())  # the decision committed; the batch has not run
    mine = restarted(nodes, pa)
    if decided == "while catching up":
        mine.decide(decision)
    mine.process("counts", 1, [dict(t) for t in tuples], ("counts", pa, 0))
    assert [dict(r.rows) for _, r in mine.spans.outbox] == sent, "the same reads"
    for reads, offset in topic.get(pa, []):  # read again from the restarted position
        mine.spans.receive(reads, ("exchange", pa, offset))
    exchange(nodes, topic)
    outputs = []
    for engine, base in nodes:
        group = engine.take_group()
        outputs += [t for out in group.outputs for t in out.tuples]
        base.apply(group)
    assert outputs == [{"seq": 0, "outcome": "short"}]
    row_a = nodes[pa][1].tables["stock"][a]
    assert (row_a["qty"], row_a["audits"]) == (5, 0), "the promise landed after the batch"
    assert nodes[owner(b)][1].tables["stock"][b]["audits"] == 0
