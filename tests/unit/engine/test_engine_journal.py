"""Command-log journaling and replay (strong and weak) over in-memory state: pure logic."""

from __future__ import annotations

from chain.dataflow import build_app
from chain.load import batch_tuples
from tests.support.fakes import MemoryBase
from txstream.engine.group import Journal, JournalEntry
from txstream.engine.partition_engine import PartitionEngine
from txstream.recovery.replay import replay_entries
from txstream.schemas.codec import Batch

LENGTH, ABORT_EVERY, BATCHES = 4, 3, 8


class Inputs:
    """The border topic: batch b at offset b - 1."""

    def get(self, topic: str, offset: int) -> Batch:
        assert topic == "chain.s0"
        return Batch("s0", offset + 1, batch_tuples(offset + 1, 3, seed=5))

    def raw(self, topic: str, offset: int) -> bytes:
        """Stands for batch b's record bytes, whose digest is kept with its id."""
        assert topic == "chain.s0", "the chain app has no OLTP transactions to replay"
        return b"batch %d" % (offset + 1)


def run_live(journal: Journal) -> tuple[MemoryBase, list[list[JournalEntry]]]:
    """Process every batch, one group each; returns the state and each group's journal."""
    app = build_app(LENGTH, abort_every=ABORT_EVERY)
    base = MemoryBase()
    engine = PartitionEngine(app.dataflow(), base, 0, app.params, journal)
    journals = []
    for b in range(1, BATCHES + 1):
        tuples = Inputs().get("chain.s0", b - 1).tuples
        record = Inputs().raw("chain.s0", b - 1)
        engine.process("s0", b, tuples, ("chain.s0", 0, b - 1), record)
        group = engine.take_group()
        base.apply(group)
        journals.append(group.journal)
    return base, journals


def replay_into_fresh(journals: list[list[JournalEntry]], strong: bool) -> MemoryBase:
    app = build_app(LENGTH, abort_every=ABORT_EVERY)
    base = MemoryBase()
    engine = PartitionEngine(app.dataflow(), base, 0, app.params)
    engine.executor.begin_replay(strong)
    done: set[tuple[str, str, int]] = set()
    for n, entries in enumerate(journals, start=1):
        replay_entries(engine, entries, Inputs(), done if strong else None)
        engine.set_position("chain.s0", n)  # as the log record's positions say
        base.apply(engine.take_group())
    engine.executor.end_replay()
    if strong:
        engine.executor.fire_pending(done)
    base.apply(engine.take_group())
    return base


def test_strong_journal_lists_every_te_in_commit_order_with_aborts() -> None:
    _, journals = run_live(Journal.ALL)
    first = [(e.procedure, e.stream, e.batch_id, e.topic, e.offset) for e in journals[0]]
    assert first == [
        ("sp1", "s0", 1, "chain.s0", 0),
        ("sp2", "s1", 1, None, None),
        ("sp3", "s2", 1, None, None),
        ("sp4", "s3", 1, None, None),
    ]
    third = [(e.procedure, e.aborted) for e in journals[2]]
    assert third == [("sp1", False), ("sp2", True)], "sp2 aborts batch 3; the chain stops"


def test_weak_journal_lists_only_border_batches() -> None:
    _, journals = run_live(Journal.BORDER)
    assert [[(e.procedure, e.batch_id, e.offset) for e in j] for j in journals] == [
        [(None, b, b - 1)] for b in range(1, BATCHES + 1)
    ]


def test_strong_replay_with_triggers_off_rebuilds_the_same_state() -> None:
    live, journals = run_live(Journal.ALL)
    assert replay_into_fresh(journals, strong=True).snapshot() == live.snapshot()


def test_weak_replay_with_triggers_on_rebuilds_the_same_state() -> None:
    live, journals = run_live(Journal.BORDER)
    assert replay_into_fresh(journals, strong=False).snapshot() == live.snapshot()


def test_pending_batches_fire_when_triggers_come_back_on() -> None:
    """A log cut inside a chain: the batches sp2 produced still reach sp3 and sp4."""
    live, journals = run_live(Journal.ALL)
    cut = [*journals[:-1], journals[-1][:2]]
    assert [e.procedure for e in cut[-1]] == ["sp1", "sp2"]
    assert replay_into_fresh(cut, strong=True).snapshot() == live.snapshot()


def test_strong_replay_without_its_upstream_names_the_missing_batch() -> None:
    _, journals = run_live(Journal.ALL)
    app = build_app(LENGTH, abort_every=ABORT_EVERY)
    engine = PartitionEngine(app.dataflow(), MemoryBase(), 0, app.params)
    engine.executor.begin_replay(strong=True)
    try:
        replay_entries(engine, journals[0][1:], Inputs(), set())
    except RuntimeError as e:
        assert "sp2 on s1 batch 1" in str(e)
    else:
        raise AssertionError("replaying sp2 without sp1's output must fail")
