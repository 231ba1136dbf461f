"""Batch ids that do not increase: an exact re-send is skipped, anything else dead-lettered.

A border batch's digest (of its record bytes, which hold its id) is kept beside the last
batch id of its stream partition, in the same group as the position, so a re-send of the
last batch is told from a different batch under a reused id, across restarts too.
"""

from __future__ import annotations

from chain.dataflow import build_app
from tests.support.fakes import MemoryBase
from txstream.engine.group import Outcome, position_key
from txstream.engine.partition_engine import PartitionEngine
from txstream.model.declarations import Record

TOPIC = "chain.s0"


def engine_over(base: MemoryBase) -> PartitionEngine:
    app = build_app(1)
    return PartitionEngine(app.dataflow(), base, 0, app.params)


def send(
    engine: PartitionEngine, batch_id: int, value: int, offset: int, content: bytes = b""
) -> Outcome:
    """Batch `batch_id` of one tuple; `content` stands for the record's bytes."""
    tuples: list[Record] = [{"key": 1, "value": value}]
    record = b"%d:%d:%s" % (batch_id, value, content)
    return engine.process("s0", batch_id, tuples, (TOPIC, 0, offset), record=record)


def total(base: MemoryBase) -> Record:
    return base.tables["totals"][(0, 1)]


def test_an_exact_resend_of_the_last_batch_is_skipped_and_counted() -> None:
    base = MemoryBase()
    engine = engine_over(base)
    assert send(engine, 1, 10, offset=0) is Outcome.PROCESSED
    assert send(engine, 1, 10, offset=1) is Outcome.DUPLICATE
    group = engine.take_group()
    base.apply(group)
    assert group.aborts == []
    assert group.stats.stale == {("s0", "resend"): 1}
    assert total(base) == {"value": 10, "batches": 1}
    assert base.tables["__sys__"][position_key(TOPIC, 0)] == {"value": 2}


def test_a_different_batch_under_the_last_id_is_dead_lettered_with_its_reason() -> None:
    base = MemoryBase()
    engine = engine_over(base)
    send(engine, 1, 10, offset=0)
    assert send(engine, 1, 99, offset=1) is Outcome.STALE
    assert send(engine, 2, 20, offset=2) is Outcome.PROCESSED
    group = engine.take_group()
    base.apply(group)
    assert [(a.procedure, a.stream, a.batch_id, a.reason) for a in group.aborts] == [
        ("<input>", "s0", 1, "stale_batch_id")
    ]
    error = group.aborts[0].error
    for part in ("batch id 1", "stream 's0'", "partition 0", "last batch id 1", "differs"):
        assert part in error, error
    assert group.stats.stale == {("s0", "dead_letter"): 1}
    # the conflicting batch ran nothing; the next good one ran
    assert total(base) == {"value": 30, "batches": 2}
    assert base.tables["__sys__"][position_key(TOPIC, 0)] == {"value": 3}


def test_a_lower_id_is_dead_lettered_whatever_its_content() -> None:
    engine = engine_over(MemoryBase())
    send(engine, 1, 10, offset=0)
    send(engine, 2, 20, offset=1)
    assert send(engine, 1, 10, offset=2) is Outcome.STALE
    aborts = engine.take_group().aborts
    assert [(a.batch_id, a.reason) for a in aborts] == [(1, "stale_batch_id")]
    assert "last batch id 2" in aborts[0].error


def test_without_a_digest_a_reused_id_cannot_pass_for_a_resend() -> None:
    engine = engine_over(MemoryBase())
    engine.process("s0", 1, [{"key": 1, "value": 10}])
    assert engine.process("s0", 1, [{"key": 1, "value": 10}]) is Outcome.STALE


def test_the_digest_commits_with_the_batch_id_and_survives_a_restart() -> None:
    base = MemoryBase()
    first = engine_over(base)
    send(first, 1, 10, offset=0)
    base.apply(first.take_group())
    restarted = engine_over(base)
    assert send(restarted, 1, 10, offset=1) is Outcome.DUPLICATE
    assert send(restarted, 1, 11, offset=2) is Outcome.STALE
    group = restarted.take_group()
    assert group.stats.stale == {("s0", "resend"): 1, ("s0", "dead_letter"): 1}
