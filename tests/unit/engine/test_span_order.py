"""The order a spanning engine keeps between its spanning and per-partition input, so that
the reads it sends hold no uncommitted per-partition write, and a restart runs again first
every batch whose reads may have gone out (`SpanRunner.holds`)."""

from __future__ import annotations

from functools import partial

from bank.stream_transfers import build_app
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.routing import partition_of
from txstream.testing import MemoryState


def engine() -> PartitionEngine:
    """Engine 0 of 2 for TSpoon's transfers: account 4 is one of its own, 0 is engine 1's."""
    owner = partial(partition_of, partitions=2)
    assert (owner((4,)), owner((0,))) == (0, 1)
    return PartitionEngine(build_app().dataflow(), MemoryState(), 0, {}, owner=owner)


def transfer(seq: int) -> list[dict[str, int]]:
    return [{"seq": seq, "payer": 4, "payee": 0, "amount": 5}]


def test_spanning_input_waits_until_per_partition_work_commits() -> None:
    e = engine()
    assert not e.spans.holds(spanning=True)
    e.process("opens", 1, [{"account": 4, "balance": 50}], ("opens", 0, 0))
    assert e.spans.holds(spanning=True)
    e.take_group()
    assert not e.spans.holds(spanning=True)


def test_spanning_input_waits_while_per_partition_work_is_in_flight() -> None:
    e = engine()
    e.process("opens", 1, [{"account": 4, "balance": 50}], ("opens", 0, 0))
    e.take_group(in_flight=True)
    assert e.spans.holds(spanning=True)  # the commit in flight may still fail
    e.committed()
    assert not e.spans.holds(spanning=True)


def test_a_spanning_batch_holds_per_partition_input_while_queued() -> None:
    e = engine()
    e.process("transfers", 1, transfer(0), ("transfers", 0, 0))
    assert not e.spans.holds(spanning=True)  # spanning work alone does not hold spanning
    assert e.spans.holds(spanning=False)  # its reads went out: engine 1's are awaited


def test_after_a_start_other_input_waits_for_the_spanning_input_to_reach_its_end() -> None:
    e = engine()
    e.spans.catch_up("transfers", 3)
    assert e.spans.catching_up and e.spans.holds(spanning=False)
    e.process("transfers", 1, transfer(0), ("transfers", 0, 0))
    e.process("transfers", 2, transfer(1), ("transfers", 0, 1))
    assert e.spans.catching_up
    e.process("transfers", 3, transfer(2), ("transfers", 0, 2))
    assert not e.spans.catching_up


def test_the_end_seen_by_the_consumer_ends_the_catch_up() -> None:
    """A transaction's commit marker may be the last offset, which no batch reaches."""
    e = engine()
    e.spans.catch_up("transfers", 5)
    e.process("transfers", 1, transfer(0), ("transfers", 0, 3))
    e.spans.reached("transfers", 4)
    assert e.spans.catching_up
    e.spans.reached("transfers", 5)
    assert not e.spans.catching_up


def test_no_catch_up_when_the_committed_position_is_at_the_end() -> None:
    e = engine()
    e.spans.catch_up("transfers", 0)
    assert not e.spans.catching_up and not e.spans.holds(spanning=False)
