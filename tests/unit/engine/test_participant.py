"""OLTP transactions inside a partition engine (`Participant`), on the bank app, no Kafka.

Covered: a `run` commits into the group or aborts leaving nothing; a 2PC `prepare` holds
its writes (durably, in `__prepared__`), locks its rows and votes; a decision applies or
drops exactly the transaction it names (idempotent, and an early abort makes the later
prepare vote no); locked rows stop runs, prepares and queries with `Conflict` (request()
returns False, nothing applied); stale coordinator epochs are fenced; `load()` restores
held transactions after a restart; reads honour isolation, `where` conditions and
aggregates.
"""

from __future__ import annotations

import json
from typing import Any

from bank.dataflow import build_app
from tests.support.fakes import MemoryBase
from txstream.engine.participant import PREPARED_TABLE
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.writeset import TOMBSTONE
from txstream.oltp.messages import Decision, EngineReply, EngineRequest, Fragment, Query, key_json


def make_engine(base: MemoryBase | None = None) -> PartitionEngine:
    return PartitionEngine(build_app().dataflow(), base or MemoryBase(), partition=0, params={})


def opened(*accounts: int) -> tuple[PartitionEngine, MemoryBase]:
    """An engine whose base holds `accounts`, each with the starting balance of 100."""
    base = MemoryBase()
    engine = make_engine(base)
    assert run(engine, "0.0", Fragment.call(accounts[0], "open_accounts", accounts=accounts))
    base.apply(engine.take_group())
    return engine, base


def send(engine: PartitionEngine, kind: str, txn_id: str, *frags: Fragment, epoch: int = 1) -> bool:
    req = EngineRequest(txn_id, epoch, kind, f"req-{txn_id}", "client", list(frags))
    return engine.participant.request(req)


def run(engine: PartitionEngine, txn_id: str, *frags: Fragment, epoch: int = 1) -> bool:
    return send(engine, "run", txn_id, *frags, epoch=epoch)


def move(kind: str, account: int, amount: int) -> Fragment:
    return Fragment.call(account, kind, account=account, amount=amount)


def read(engine: PartitionEngine, q: Query) -> bool:
    return engine.participant.request(EngineRequest("0.9", 1, "read", "rq", "client", [], q))


def reply(engine: PartitionEngine) -> EngineReply:
    return engine.group.replies[-1]


def test_run_commits_into_the_group_with_json_results() -> None:
    engine = make_engine()
    assert run(engine, "1.1", Fragment.call(1, "open_accounts", accounts=[1, 2]))
    assert run(engine, "1.2", move("debit", 1, 30), move("credit", 2, 30))
    assert engine.group.ws.tables["accounts"] == {(1,): {"balance": 70}, (2,): {"balance": 130}}
    assert engine.group.replies == [
        EngineReply(
            "1.1",
            0,
            "result",
            True,
            results="[2]",
            request_id="req-1.1",
            reply_to="client",
            epoch=1,
        ),
        EngineReply(
            "1.2",
            0,
            "result",
            True,
            results="[70, 130]",
            request_id="req-1.2",
            reply_to="client",
            epoch=1,
        ),
    ]
    assert engine.group.stats.executions == 2


def test_overdraw_aborts_the_whole_run_and_writes_nothing() -> None:
    engine, _ = opened(1, 2)
    assert run(engine, "1.1", move("credit", 2, 150), move("debit", 1, 150))
    r = reply(engine)
    assert (r.kind, r.ok, r.reason, r.results) == ("result", False, "constraint_violation", "[]")
    assert "balance >= 0" in r.detail
    assert "accounts" not in engine.group.ws.tables
    assert engine.group.stats.oltp_aborts == {("debit", "constraint_violation"): 1}  # for metrics


def test_unknown_procedure_is_refused() -> None:
    engine = make_engine()
    assert run(engine, "1.1", Fragment.call(1, "steal", account=1))
    r = reply(engine)
    assert (r.ok, r.reason) == (False, "unknown_procedure") and "'steal'" in r.detail
    # counted, but not under a name a client chose (unbounded label values)
    assert engine.group.stats.oltp_aborts == {("<oltp>", "unknown_procedure"): 1}


def prepared(account: int = 1, txn_id: str = "1.5") -> tuple[PartitionEngine, MemoryBase]:
    """Accounts 1 and 2 committed at 100; `txn_id` prepared debiting `account` by 30."""
    engine, base = opened(1, 2)
    assert send(engine, "prepare", txn_id, move("debit", account, 30))
    return engine, base


def test_prepare_holds_its_writes_locks_them_and_votes_yes() -> None:
    engine, _ = prepared()
    group, txns = engine.group, engine.participant
    assert "accounts" not in group.ws.tables
    row = group.ws.tables[PREPARED_TABLE][("1.5",)]
    assert row == {
        "epoch": 1,
        "writes": '{"rows": [["accounts", [1], {"balance": 70}]], "formulas": []}',
        "request_id": "req-1.5",
        "reply_to": "client",
        "results": "[70]",
    }
    assert group.replies == [
        EngineReply(
            "1.5",
            0,
            "vote",
            True,
            results="[70]",
            request_id="req-1.5",
            reply_to="client",
            epoch=1,  # the decision must carry it
        )
    ]
    assert group.flags.urgent and txns.blocked
    assert txns.locks == {"accounts": {(1,): "1.5"}}


def test_commit_decision_applies_the_held_writes_and_acks() -> None:
    engine, base = prepared()
    engine.participant.decide(Decision("1.5", 1, True))
    ws = engine.group.ws
    assert ws.tables["accounts"] == {(1,): {"balance": 70}}
    assert ws.tables[PREPARED_TABLE] == {("1.5",): TOMBSTONE}
    assert reply(engine) == EngineReply("1.5", 0, "ack", True, detail="committed")
    assert not engine.participant.blocked and engine.participant.locks == {}
    base.apply(engine.take_group())
    assert base.tables["accounts"][(1,)] == {"balance": 70} and base.tables[PREPARED_TABLE] == {}


def test_abort_decision_drops_the_held_writes() -> None:
    engine, _ = prepared()
    engine.participant.decide(Decision("1.5", 1, False))
    assert "accounts" not in engine.group.ws.tables
    assert engine.group.ws.tables[PREPARED_TABLE] == {("1.5",): TOMBSTONE}
    assert reply(engine) == EngineReply("1.5", 0, "ack", True, detail="aborted")
    assert not engine.participant.blocked and engine.participant.locks == {}


def test_decision_for_another_txn_is_acked_and_changes_nothing() -> None:
    engine, _ = prepared()
    for commit in (True, False):
        engine.participant.decide(Decision("1.4", 1, commit))
        assert reply(engine) == EngineReply("1.4", 0, "ack", True, detail="not prepared here")
    assert "accounts" not in engine.group.ws.tables
    assert set(engine.participant.prepared) == {"1.5"}
    assert engine.participant.locks == {"accounts": {(1,): "1.5"}}
    engine.participant.decide(Decision("1.5", 1, True))
    engine.participant.decide(Decision("1.5", 1, True))  # a duplicate: applied once
    assert reply(engine).detail == "not prepared here"
    assert engine.group.ws.tables["accounts"] == {(1,): {"balance": 70}}


def test_a_decision_at_another_epoch_than_the_prepare_is_dead_lettered() -> None:
    engine, _ = prepared()  # at epoch 1
    replies = len(engine.group.replies)
    for epoch in (0, 2):
        for commit in (True, False):
            engine.participant.decide(Decision("1.5", epoch, commit))
    assert len(engine.group.replies) == replies, "no ack: the coordinator must still decide"
    assert "accounts" not in engine.group.ws.tables
    assert set(engine.participant.prepared) == {"1.5"}
    letters = engine.group.aborts
    assert [(a.reason, a.procedure) for a in letters] == [("wrong_epoch", "<decision>")] * 4
    assert "epoch 0" in letters[0].error and "prepared at 1" in letters[0].error
    engine.participant.decide(Decision("1.5", 1, True))  # the right one still commits
    assert engine.group.ws.tables["accounts"] == {(1,): {"balance": 70}}
    assert reply(engine) == EngineReply("1.5", 0, "ack", True, detail="committed")


def test_parameters_that_do_not_fit_the_signature_run_nothing() -> None:
    engine, _ = opened(1, 2)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"account": 1}, "'amount' is missing"),
        ({"account": 1, "amount": 5, "note": "x"}, "'note' is not declared"),
        ({"account": 1, "amount": "5"}, "'amount': Input should be a valid integer"),
    ]
    for params, named in cases:
        for kind in ("run", "prepare"):
            assert send(
                engine, kind, "1.9", move("credit", 2, 1), Fragment.call(1, "debit", **params)
            )
            r = reply(engine)
            assert (r.ok, r.reason) == (False, "bad_request"), r
            assert named in r.detail and "fragment debit" in r.detail, r.detail
    assert "accounts" not in engine.group.ws.tables and not engine.participant.blocked
    assert engine.group.stats.oltp_aborts == {("debit", "bad_request"): 6}


def test_abort_before_prepare_makes_the_prepare_vote_no() -> None:
    engine, _ = opened(1, 2)
    engine.participant.decide(Decision("1.7", 1, False))
    assert send(engine, "prepare", "1.7", move("debit", 1, 30))
    r = reply(engine)
    assert (r.txn_id, r.kind, r.ok, r.reason) == ("1.7", "vote", False, "aborted")
    assert not engine.participant.blocked and PREPARED_TABLE not in engine.group.ws.tables


def test_locked_rows_stop_runs_prepares_and_scans_until_the_decision() -> None:
    engine, _ = prepared(account=1)
    before = len(engine.group.replies), engine.group.stats.executions
    assert not run(engine, "1.6", move("credit", 1, 10))
    assert not send(engine, "prepare", "1.7", move("credit", 2, 1), move("credit", 1, 1))
    assert not read(engine, Query("accounts"))
    assert not read(engine, Query("accounts", key=key_json((1,))))
    assert (len(engine.group.replies), engine.group.stats.executions) == before
    assert "accounts" not in engine.group.ws.tables and set(engine.participant.prepared) == {"1.5"}
    assert run(engine, "1.8", move("credit", 2, 10)), "an unlocked row is free"
    assert reply(engine).ok and engine.group.ws.tables["accounts"] == {(2,): {"balance": 110}}
    assert read(engine, Query("accounts", key=key_json((2,))))
    engine.participant.decide(Decision("1.5", 1, True))
    assert run(engine, "1.6", move("credit", 1, 10))
    assert reply(engine).results == "[80]"


def test_conflicting_request_with_a_newer_epoch_writes_nothing() -> None:
    engine, _ = prepared(account=1)
    assert not run(engine, "2.1", move("credit", 1, 10), epoch=2)
    assert set(engine.group.ws.tables) == {PREPARED_TABLE}, engine.group.ws.tables


def test_stale_epoch_is_fenced_even_after_a_restart() -> None:
    engine, base = opened(1, 2)
    assert run(engine, "5.1", move("credit", 1, 1), epoch=5)
    assert run(engine, "4.9", move("credit", 2, 1), epoch=4)
    r = reply(engine)
    assert (r.txn_id, r.ok, r.reason) == ("4.9", False, "fenced")
    assert engine.group.ws.tables["accounts"] == {(1,): {"balance": 101}}
    base.apply(engine.take_group())
    fresh = make_engine(base)
    assert send(fresh, "prepare", "4.8", move("credit", 2, 1), epoch=4)
    r = reply(fresh)
    assert (r.kind, r.ok, r.reason) == ("vote", False, "fenced") and not fresh.participant.blocked


def test_load_restores_prepared_transactions_and_their_locks() -> None:
    engine, base = prepared(account=2, txn_id="3.2")
    base.apply(engine.take_group())
    fresh = make_engine(base)
    assert not fresh.participant.blocked
    fresh.participant.load()
    held = fresh.participant.prepared["3.2"]
    assert (held.epoch, held.request_id, held.reply_to, held.results) == (
        1,
        "req-3.2",
        "client",
        "[70]",
    )
    assert fresh.participant.locks == {"accounts": {(2,): "3.2"}}
    assert not run(fresh, "3.3", move("debit", 2, 1))
    fresh.participant.decide(Decision("3.2", 1, True))
    base.apply(fresh.take_group())
    assert base.tables["accounts"] == {(1,): {"balance": 100}, (2,): {"balance": 70}}
    assert base.tables[PREPARED_TABLE] == {}


def rows_of(engine: PartitionEngine) -> list[list[object]]:
    r = reply(engine)
    assert (r.kind, r.ok) == ("rows", True), r
    rows: list[list[object]] = json.loads(r.rows)
    return rows


def test_isolation_and_where_conditions() -> None:
    engine, _ = opened(1, 2, 3)
    assert run(engine, "1.1", move("debit", 1, 40), move("debit", 3, 95))  # in this group
    key1 = key_json((1,))
    assert read(engine, Query("accounts", "read_committed", key1))
    assert rows_of(engine) == [[[1], {"balance": 60}]]  # the reply commits with the group
    low = json.dumps([["balance", "<", 80]])
    assert read(engine, Query("accounts", "snapshot", where=low))
    assert rows_of(engine) == [[[1], {"balance": 60}], [[3], {"balance": 5}]]
    assert read(engine, Query("accounts", where=json.dumps([["balance", ">=", 100]])))
    assert rows_of(engine) == [[[2], {"balance": 100}]]
    assert send(engine, "prepare", "1.2", move("debit", 2, 30))  # holds account 2
    key2 = key_json((2,))
    assert not read(engine, Query("accounts", "snapshot", key2))  # waits for the decision
    assert read(engine, Query("accounts", "read_committed", key2))  # does not wait...
    assert rows_of(engine) == [[[2], {"balance": 100}]]  # ...and sees the before-image


def test_bad_reads_fail_with_a_reason() -> None:
    engine, _ = opened(1)
    assert read(engine, Query("nope"))
    assert (reply(engine).ok, reply(engine).reason) == (False, "unknown_table")
    assert read(engine, Query("accounts", where='[["owner", "=", "x"]]'))
    assert (reply(engine).ok, reply(engine).reason) == (False, "bad_query")
    assert "'owner'" in reply(engine).detail


def test_aggregates_total_the_matching_rows() -> None:
    engine, _ = opened(1, 2, 3)
    assert run(engine, "1.1", move("debit", 3, 40))
    aggs = json.dumps([["count", ""], ["sum", "balance"], ["min", "balance"]])
    assert read(engine, Query("accounts", where='[["balance", ">", 50]]', aggregates=aggs))
    assert rows_of(engine) == [[["*"], {"count": 3, "sum_balance": 260, "min_balance": 60}]]


def test_aggregate_of_a_missing_field_is_a_bad_query() -> None:
    engine, _ = opened(1)
    assert read(engine, Query("accounts", aggregates='[["sum", "owner"]]'))
    assert (reply(engine).ok, reply(engine).reason) == (False, "bad_query")
    assert "'owner'" in reply(engine).detail
