"""The live engine's pipelined group commit, over RocksDB and its caches, against the serial
replay `txstream verify` runs (`tests/support/simulation/oltp_pipeline.py`): stream batches, nested
transactions, single-partition runs, 2PC with add() formulas, promises that open a row with
a put and an add, their decisions, queries and scans."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.simulation.oltp_pipeline import Event, Op, Simulation, describe, generate, txn_id
from txstream.oltp.messages import EngineRequest, Fragment

SEEDS = 30
RECORDS = 300


@pytest.fixture
def sim(tmp_path: Path) -> Simulation:
    return Simulation(tmp_path)


def test_a_pipelined_commit_commits_what_the_serial_replay_does(sim: Simulation) -> None:
    """Commits started, encoded and finished at random points between records change
    nothing: the group in flight is read through until applied, and the caches follow
    each apply. (A next group not reading through the one in flight diverges in 19 seeds
    of 20 here, caches not following the apply in 20 of 20.)"""
    for seed in range(SEEDS):
        events = generate(seed, RECORDS)
        found = sim.check(events)
        assert found is None, f"seed {seed}:\n{describe(sim.shrink(events))}\n{found}"


def test_handovers_at_random_change_nothing(sim: Simulation) -> None:
    """A partition moving to another worker at random points (its state reloaded from the
    store: prepared and promised write sets, with their formulas and landing order)
    commits what the serial replay does."""
    for seed in range(SEEDS):
        events = generate(seed, RECORDS, handovers=0.02)
        found = sim.check(events)
        assert found is None, f"seed {seed}:\n{describe(sim.shrink(events))}\n{found}"


def request(kind: str, n: int, *fragments: Fragment) -> Op:
    return Op(kind, EngineRequest(txn_id(kind, n), 1, kind, f"r{n}", "client", list(fragments)))


def deposit(account: int, amount: int) -> Fragment:
    """A plain read-modify-write put: it pins the row, which lands as the promise left it."""
    return Fragment.call(account, "deposit", account=account, amount=amount)


def credit(account: int, amount: int) -> Fragment:
    """An add() formula."""
    return Fragment.call(account, "credit", account=account, amount=amount)


def test_a_handover_lands_a_prepared_transactions_adds_over_a_promises(sim: Simulation) -> None:
    """A 2PC transaction's add() prepared before a handover and a promise's add() on the same
    row decided meanwhile: both land. (Reloaded, the prepared write set has its rows but
    not its formulas, so it lands the row as it computed it at its prepare; a promise
    that landed before it, past its lock, lost its 10: 18 where the replay has 28.)"""
    events: list[Event] = [
        request("run", 1, Fragment.call(2, "open_account", account=2, balance=10, extra=7)),
        request("promise", 2, credit(2, 10)),
        request("prepare", 3, credit(2, 1)),
        Op("decide", of="r2"),
        "handover",
        Op("decide", of="r3"),
    ]
    found = sim.check(events)
    assert found is None, f"\n{describe(events)}\n{found}"


# Two promises pin one row, and both are committed while a 2PC transaction prepared on the
# row makes them wait to land; they must land in the order they were decided (the second
# decided lands last, and its row stands), whether or not the partition moves meanwhile.
WAITING_TO_LAND: list[Event] = [
    request("run", 1, Fragment.call(4, "open_account", account=4, balance=10, extra=0)),
    request("promise", 2, deposit(4, 1)),  # lands 11
    request("promise", 3, deposit(4, 10)),  # lands 20
    request("prepare", 4, Fragment.call(4, "credit", account=4, amount=1)),
    Op("decide", of="r3"),
    Op("decide", of="r2"),
]


def test_promises_waiting_to_land_land_in_decision_order(sim: Simulation) -> None:
    events = [*WAITING_TO_LAND, "start", Op("decide", of="r4")]
    assert sim.check(events) is None


def test_promises_waiting_to_land_keep_their_order_across_a_handover(sim: Simulation) -> None:
    events = [*WAITING_TO_LAND, "handover", Op("decide", of="r4")]
    found = sim.check(events)
    assert found is None, f"\n{describe(events)}\n{found}"
