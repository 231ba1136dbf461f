"""Reads of a partition's committed state between groups (`engine.committed_reads`).

A read sees what the applied commits left and nothing else; it waits (`Conflict`) at a row
with a write its client may know of that is not applied yet (the commit in flight, a 2PC
decision in the pending group) or held by a prepared transaction, so a reader sees its own
acknowledged writes; a write of the pending group nobody has been told of does not hold it.
The same through a worker's HTTP endpoint is in tests/integration/test_reads.py.
"""

from __future__ import annotations

import json

import pytest

from bank.dataflow import build_app as bank_app
from inventory.dataflow import build_app as inventory_app
from tests.support.fakes import MemoryBase, send
from txstream.engine.committed_reads import Conflict
from txstream.engine.fragments import Failed
from txstream.engine.partition_engine import PartitionEngine
from txstream.oltp.messages import Decision, EngineRequest, Fragment
from ycsb.dataflow import build_app as ycsb_app
from ycsb.dataflow import row_of


def run(engine: PartitionEngine, kind: str, txn_id: str, *frags: Fragment) -> None:
    req = EngineRequest(txn_id, 1, kind, f"req-{txn_id}", "client", list(frags))
    assert engine.participant.request(req)


def bank(*accounts: int) -> tuple[PartitionEngine, MemoryBase]:
    """Accounts at 100 each, committed."""
    base = MemoryBase()
    engine = PartitionEngine(bank_app().dataflow(), base, partition=0, params={})
    run(engine, "run", "0.1", Fragment.call(accounts[0], "open_accounts", accounts=accounts))
    base.apply(engine.take_group())
    return engine, base


def debit(account: int, amount: int) -> Fragment:
    return Fragment.call(account, "debit", account=account, amount=amount)


def balance(engine: PartitionEngine, account: int) -> int:
    row = engine.reader.row("accounts", (account,))
    assert row is not None
    return int(row["balance"])


def test_a_read_sees_the_committed_row() -> None:
    engine, _ = bank(1, 2)
    assert balance(engine, 1) == 100
    assert engine.reader.row("accounts", (3,)) is None


def test_a_write_in_the_pending_group_is_not_seen_and_holds_no_read() -> None:
    """Its answer goes out with the group's commit: until then the read is before it."""
    engine, base = bank(1, 2)
    run(engine, "run", "0.2", debit(1, 30))
    assert balance(engine, 1) == 100
    base.apply(engine.take_group())
    engine.committed()
    assert balance(engine, 1) == 70


def test_the_commit_in_flight_makes_a_read_of_its_rows_wait_until_applied() -> None:
    """Its client may already have the answer: a read before the apply would not show it."""
    engine, base = bank(1, 2)
    run(engine, "run", "0.2", debit(1, 30))
    in_flight = engine.take_group(in_flight=True)
    with pytest.raises(Conflict):
        engine.reader.row("accounts", (1,))
    base.apply(in_flight)
    engine.committed()
    assert balance(engine, 1) == 70


def test_a_prepared_row_waits_until_the_decision_is_committed() -> None:
    engine, base = bank(1, 2)
    run(engine, "prepare", "1.5", debit(1, 30))
    base.apply(engine.take_group())  # the prepare and its vote committed
    engine.committed()
    with pytest.raises(Conflict):
        engine.reader.row("accounts", (1,))
    engine.decide(Decision("1.5", 1, True))  # the client is told "committed" now
    with pytest.raises(Conflict):
        engine.reader.row("accounts", (1,))
    assert balance(engine, 2) == 100, "a row the decision did not write reads at once"
    base.apply(engine.take_group())
    engine.committed()
    assert balance(engine, 1) == 70


def test_a_scan_waits_while_its_table_has_a_write_not_yet_applied() -> None:
    engine, base = bank(1, 2)
    engine.reader.guard("accounts", None)
    run(engine, "run", "0.2", debit(2, 1))
    engine.take_group(in_flight=True)
    with pytest.raises(Conflict):
        engine.reader.guard("accounts", None)
    base.apply(engine.take_group())
    engine.committed()
    engine.reader.guard("accounts", None)


def test_an_unknown_table_is_named() -> None:
    engine, _ = bank(1)
    with pytest.raises(ValueError, match=r"no table 'acounts'.*accounts"):
        engine.reader.row("acounts", (1,))


def ycsb(*keys: int) -> tuple[PartitionEngine, MemoryBase]:
    base = MemoryBase()
    engine = PartitionEngine(ycsb_app().dataflow(), base, partition=0, params={})
    run(engine, "run", "0.1", Fragment.call(keys[0], "load", keys=list(keys)))
    base.apply(engine.take_group())
    engine.committed()
    return engine, base


def test_a_read_only_call_runs_its_procedure_on_the_committed_state() -> None:
    engine, _ = ycsb(1, 2)
    results = engine.reader.call([Fragment.call(2, "read", id=2)])
    assert json.loads(str(results)) == [row_of(2)]
    assert engine.group.empty, "a read commits nothing"


def test_a_read_only_call_that_writes_fails_naming_the_rule_and_changes_nothing() -> None:
    engine, base = ycsb(1)
    update = Fragment.call(1, "update", id=1, field="field0", value="new")
    outcome = engine.reader.call([update])
    assert isinstance(outcome, Failed) and outcome.reason == "read_only"
    assert "usertable" in outcome.detail
    assert engine.group.empty
    assert base.tables["usertable"][(1,)]["field0"] == row_of(1)["field0"]


def test_a_read_only_call_waits_at_a_row_the_commit_in_flight_writes() -> None:
    engine, _ = ycsb(1)
    run(engine, "run", "0.2", Fragment.call(1, "update", id=1, field="field0", value="new"))
    engine.take_group(in_flight=True)
    with pytest.raises(Conflict):
        engine.reader.call([Fragment.call(1, "read", id=1)])


def test_freshness_is_what_the_applied_commits_left() -> None:
    engine, base = bank(1)
    engine.ledger.set_position("bank.oltp", 5)
    assert engine.reader.freshness(["bank.oltp"], ["payroll"]).positions == {"bank.oltp": 0}
    base.apply(engine.take_group())
    engine.committed()
    fresh = engine.reader.freshness(["bank.oltp"], ["payroll"])
    assert fresh.positions == {"bank.oltp": 5} and fresh.batches == {} and fresh.partition == 0


def test_a_row_a_promise_writes_waits_until_its_decision_is_committed() -> None:
    """SERIALIZE tells the client its promise committed before the engine has the decision:
    a read of the row before the promise lands would hide it."""
    base = MemoryBase()
    engine = PartitionEngine(inventory_app().dataflow(), base, partition=0, params={})
    assert send(engine, "run", "0.1", Fragment.call((1, 1), "open_site", item=1, site=1)).ok
    assert send(engine, "run", "0.2", Fragment.call((1, 2), "open_site", item=1, site=2)).ok
    base.apply(engine.take_group())
    engine.committed()
    stock = Fragment.call((1, 1), "restock", item=1, site=1, qty=5)
    promised = send(engine, "promise", "p.r", stock)
    assert promised.ok
    base.apply(engine.take_group())  # the promise held, committed
    engine.committed()
    with pytest.raises(Conflict):
        engine.reader.row("stock", (1, 1))
    with pytest.raises(Conflict):
        engine.reader.guard("stock", None)
    assert engine.reader.row("stock", (1, 2)) is not None, "a row it does not write reads"
    engine.participant.decide(Decision(promised.txn_id, 0, True))
    with pytest.raises(Conflict):
        engine.reader.row("stock", (1, 1))
    base.apply(engine.take_group())
    engine.committed()
    row = engine.reader.row("stock", (1, 1))
    assert row is not None and row["qty"] == 5
