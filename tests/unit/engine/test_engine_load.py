"""What an engine keeps in its state is loaded after recovery, never when it is built.

RocksDB runs without a write-ahead log, so after a SIGKILL the store is behind its
changelog until `restore` replays the rest. An engine built over it first must not take
anything from it then: below PL3 the values each key had when the current epoch began (a
batch of that epoch sent them to the other engines, and must send them again), the
spanning stream's last batch (the point serializable reads are answered at), and the
prepared 2PC and promised transactions. `PartitionEngine.load` takes them once the store
is caught up, and the engine loads before it serves in any case.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bank.dataflow import INITIAL_BALANCE
from bank.dataflow import build_app as build_bank
from bank.stream_transfers import build_app as build_transfers
from bank.transfer_reference import reference
from tests.support.simulation.store import LaggingState
from txstream.engine.epochs import EPOCH_TABLE
from txstream.engine.participant import PREPARED_TABLE
from txstream.engine.partition_engine import PartitionEngine
from txstream.model.declarations import Isolation, Key, Record
from txstream.oltp.messages import Decision, EngineRequest, Fragment

OPENING = {0: 100, 1: 100}
EPOCH = 8  # batches 1-7 are all of epoch 0


def transfers_engine(base: LaggingState, isolation: Isolation = Isolation.PL2) -> PartitionEngine:
    """The bank's spanning transfers on one engine that owns every account."""
    df = build_transfers(isolation=isolation, epoch=EPOCH).dataflow()
    return PartitionEngine(df, base, 0, {}, owner=lambda key: 0)


def transfer(batch_id: int, amount: int) -> list[Record]:
    return [{"seq": batch_id, "payer": 0, "payee": 1, "amount": amount}]


def run(engine: PartitionEngine, base: LaggingState, stream: str, b: int, t: list[Record]) -> None:
    engine.process(stream, b, t)
    base.apply(engine.take_group())


def opened(isolation: Isolation = Isolation.PL2) -> tuple[PartitionEngine, LaggingState]:
    """Both accounts opened, and that flushed: what the store keeps through a crash."""
    base = LaggingState()
    engine = transfers_engine(base, isolation)
    opens = [{"account": a, "balance": b} for a, b in OPENING.items()]
    run(engine, base, "opens", 1, opens)
    base.flush()
    return engine, base


def balances(base: LaggingState) -> dict[int, int]:
    return {int(k[0]): row["balance"] for k, row in base.tables["accounts"].items()}


def test_a_restart_behind_the_changelog_reads_the_epochs_starting_values() -> None:
    """Batches 1 and 2 of epoch 0 commit; the store loses them (no flush since the
    accounts opened), so the engine restarting is built over a store without the epoch's
    kept starting values; the changelog then brings the store up to date, and batch 3 of
    the same epoch must still read the balances as of the epoch's start."""
    engine, base = opened()
    run(engine, base, "transfers", 1, transfer(1, 10))
    run(engine, base, "transfers", 2, transfer(2, 5))
    base.crash()
    assert base.behind == 2 and EPOCH_TABLE not in base.tables

    restarted = transfers_engine(base)  # as `PartitionTask.open` builds it: before restore
    assert base.restore() == 2
    run(restarted, base, "transfers", 3, transfer(3, 1))

    batches = [transfer(1, 10), transfer(2, 5), transfer(3, 1)]
    _, expected = reference(OPENING, batches, Isolation.PL2, EPOCH)
    assert balances(base) == expected
    kept = {key: row["row"] for key, row in base.tables[EPOCH_TABLE].items()}
    start = '{"balance": 100}'  # each account's as epoch 0 began
    assert kept == {("transfers", 0, "accounts", a): start for a in OPENING}


def test_a_restart_behind_the_changelog_answers_at_its_last_batch() -> None:
    """The point serializable reads are answered at is the last spanning batch in the
    store once it is caught up, not the one it had fallen back to."""
    engine, base = opened(Isolation.PL4)
    run(engine, base, "transfers", 1, transfer(1, 10))
    run(engine, base, "transfers", 2, transfer(2, 5))
    base.crash()
    restarted = transfers_engine(base, Isolation.PL4)
    base.restore()
    restarted.load()
    assert restarted.history is not None and restarted.history.point == 2


class _Unreadable(LaggingState):
    """A store that refuses every read while `closed`: nothing may read it then."""

    closed = False

    def get(self, table: str, key: Key) -> Record | None:
        assert not self.closed, f"read {table} {key} from a store not restored yet"
        return super().get(table, key)

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        assert not self.closed, f"scanned {table} from a store not restored yet"
        return super().scan(table, prefix)


def test_building_an_engine_reads_nothing_from_its_store() -> None:
    _, base = opened()
    unreadable = _Unreadable()
    unreadable.tables = base.tables
    unreadable.closed = True
    engine = transfers_engine(unreadable)
    unreadable.closed = False
    engine.load()
    run(engine, unreadable, "transfers", 1, transfer(1, 10))
    assert balances(unreadable) == {0: 90, 1: 110}


def test_an_engine_loads_once_before_it_serves() -> None:
    _, base = opened()
    engine = transfers_engine(base)
    engine.load()
    with pytest.raises(RuntimeError, match="loaded already"):
        engine.load()
    served = transfers_engine(base)
    served.process("transfers", 1, transfer(1, 10))  # it loaded first
    with pytest.raises(RuntimeError, match="loaded already"):
        served.load()


def test_a_decision_before_the_explicit_load_finds_its_prepared_transaction() -> None:
    """Command-log recovery replays decisions: one for a transaction prepared before the
    store's log offset must find it held, so the engine loads before it decides."""
    base = LaggingState()
    engine = PartitionEngine(build_bank().dataflow(), base, 0, {})
    frag = Fragment.call(1, "open_accounts", accounts=[1])
    assert engine.request(EngineRequest("1.1", 1, "run", "r1", "client", [frag]))
    credit = Fragment.call(1, "credit", account=1, amount=5)
    assert engine.request(EngineRequest("1.2", 1, "prepare", "r2", "client", [credit]))
    base.apply(engine.take_group())

    fresh = PartitionEngine(build_bank().dataflow(), base, 0, {})
    fresh.decide(Decision("1.2", 1, True))
    base.apply(fresh.take_group())
    assert base.tables["accounts"][(1,)] == {"balance": INITIAL_BALANCE + 5}
    assert base.tables[PREPARED_TABLE] == {}
