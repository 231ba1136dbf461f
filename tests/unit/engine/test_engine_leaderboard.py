"""The leaderboard app on the partition engine (in-memory base) agrees with the reference.

This isolates engine semantics (graph order, nested transactions, windows, triggers) from
Kafka; the end-to-end runs over the real stack check the same agreement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leaderboard.dataflow import Params, build_app
from leaderboard.reference_data import reference_batches
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import iter_batches
from tests.support.fakes import MemoryBase
from tests.support.reference.leaderboard_ref import run_reference
from txstream import App
from txstream.config import Settings
from txstream.engine.group import CommitGroup
from txstream.engine.partition_engine import PartitionEngine
from txstream.model.declarations import Key, Record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec, table_rows
from txstream.state.committed import CommittedState
from txstream.state.store import StateStore


class RocksBase:
    """The worker's committed state: RocksDB behind its caches, each group encoded as the
    commit thread encodes it and applied as the task thread applies it."""

    def __init__(self, app: App, path: Path) -> None:
        self.codec = StateCodec(app.dataflow(), SchemaRegistry(Settings().schema_dir))
        self.store = StateStore.open(path)
        self.state = CommittedState(self.store, self.codec)

    def apply(self, group: CommitGroup) -> None:
        self.state.apply(self.codec.encode_writes(group.ws), self.state.log_offset() + 1)

    @property
    def tables(self) -> dict[str, dict[Key, Record]]:
        return table_rows(self.codec, dict(self.store.scan(b"")))


def run_engine(
    votes: Path,
    params: Params,
    batch_size: int,
    group_every: int,
    pipelined: bool = False,
    rocksdb: Path | None = None,
) -> dict[str, object]:
    """`pipelined`: each group reaches the base only once the next one is under way, as
    when its commit is in flight, so the engine must read through it meanwhile.
    `rocksdb`: the committed state is the worker's, in a RocksDB there."""
    app = build_app(params)
    base: MemoryBase | RocksBase
    if rocksdb is None:
        base = MemoryBase()
        engine = PartitionEngine(app.dataflow(), base, 0, vars(params))
    else:
        base = RocksBase(app, rocksdb)
        engine = PartitionEngine(app.dataflow(), base.state, 0, vars(params))
    for stream, tuples in reference_batches(params.contestants).items():
        engine.process(stream, 1, tuples)
    base.apply(engine.take_group())
    in_flight = None
    for batch in iter_batches(votes, batch_size):
        tuples = [
            {
                "vote_id": v.vote_id,
                "phone_number": v.phone_number,
                "contestant_number": v.contestant_number,
            }
            for v in batch.votes
        ]
        engine.process("votes", batch.batch_id, tuples)
        if batch.batch_id % group_every == 0:
            if not pipelined:
                base.apply(engine.take_group())
                continue
            if in_flight is not None:
                base.apply(in_flight)
                engine.committed()
            in_flight = engine.take_group(in_flight=True)
    if in_flight is not None:
        base.apply(in_flight)
        engine.committed()
    base.apply(engine.take_group())
    assert engine.group.aborts == []
    document = result_document(base.tables)
    if isinstance(base, RocksBase):
        base.store.close()
    return document


def reference(votes: Path, params: Params, batch_size: int) -> dict[str, object]:
    return run_reference(
        votes,
        contestants=params.contestants,
        threshold=params.threshold,
        max_votes=params.max_votes,
        window=params.window,
        slide=params.slide,
        batch_size=batch_size,
    )


@pytest.mark.parametrize(
    ("seed", "count", "params", "batch_size", "group_every", "pipelined"),
    [
        (1, 6000, Params(contestants=12, threshold=1000, window=100, slide=1), 1, 37, False),
        (2, 6000, Params(contestants=12, threshold=1000, window=100, slide=10), 10, 5, False),
        (3, 30000, Params(contestants=50, threshold=5000, window=100, slide=10), 1, 500, False),
        (4, 6000, Params(contestants=12, threshold=1000, window=100, slide=1), 1, 37, True),
        (5, 6000, Params(contestants=12, threshold=1000, window=100, slide=10), 10, 1, True),
    ],
)
def test_engine_agrees_with_reference(
    tmp_path: Path,
    seed: int,
    count: int,
    params: Params,
    batch_size: int,
    group_every: int,
    pipelined: bool,
) -> None:
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, count, contestants=params.contestants, seed=seed)
    expected = reference(votes, params, batch_size)
    got = run_engine(votes, params, batch_size, group_every, pipelined)
    assert got == {k: expected[k] for k in got}
    assert got["removed"], "the case must exercise removals"


@pytest.mark.parametrize(
    ("seed", "params", "batch_size", "group_every", "pipelined"),
    [
        (6, Params(contestants=12, threshold=1000, window=100, slide=10), 1, 1, False),
        (7, Params(contestants=12, threshold=1000, window=100, slide=1), 1, 1, True),
        (8, Params(contestants=12, threshold=1000, window=100, slide=10), 10, 7, True),
    ],
)
def test_engine_over_rocksdb_and_its_caches_agrees_with_reference(
    tmp_path: Path, seed: int, params: Params, batch_size: int, group_every: int, pipelined: bool
) -> None:
    """Small groups, so rows and the window are read back through the caches after almost
    every commit."""
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 4000, contestants=params.contestants, seed=seed)
    expected = reference(votes, params, batch_size)
    got = run_engine(votes, params, batch_size, group_every, pipelined, tmp_path / "db")
    assert got == {k: expected[k] for k in got}
    assert got["removed"], "the case must exercise removals"
