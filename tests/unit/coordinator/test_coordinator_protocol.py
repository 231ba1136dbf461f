"""The coordinator's 2PC state machine (`Coordinator` -> `Actions`), driven with explicit times.

Covered: single-partition routing (no log), 2PC begin/prepare/vote/decision/ack/end with
results in request order, abort on a no vote and on timeout, resending unacknowledged
decisions, recovery from the log (new epoch, presumed abort of the undecided, resend of
the decided), where the log may be truncated (below the oldest open transaction, never
past the newest record, and replaying the rest gives the same state), inquiries answered
from outcomes, request validation (parameters against the
transaction's declared signature included), a reply_to other than the client reply topic
refused and answered nowhere, decisions at the epoch of their prepare however often the
coordinator restarts, keyed/scan reads and aggregates combined across partitions. These
are the protocol's guarantees: decisions go to `decisions` (sent only after the log
commits), and every in-doubt transaction is finished after a restart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from bank.dataflow import build_app
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.oltp.messages import (
    CoordinatorLog,
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    Query,
    TxnRequest,
    TxnResult,
    key_json,
)
from txstream_coordinator.actions import Actions
from txstream_coordinator.coordinator import Coordinator

P = 3
TOPICS = AppTopics("bank")
CLIENT = TOPICS.oltp_out


def key_on(part: int, skip: int = 0) -> int:
    """The `skip`-th account number owned by partition `part`."""
    return [n for n in range(1, 500) if partition_of((n,), P) == part][skip]


def coordinator() -> Coordinator:
    return Coordinator(P, TOPICS, build_app().decl.transactions, ["accounts"], resend_s=2.0)


def txn(*fragments: Fragment, timeout_ms: int = 1000) -> TxnRequest:
    return TxnRequest("req-1", CLIENT, timeout_ms, list(fragments))


def query(q: Query, timeout_ms: int = 1000) -> TxnRequest:
    return TxnRequest("req-1", CLIENT, timeout_ms, query=q)


def move(kind: str, account: int, amount: int = 5) -> Fragment:
    return Fragment.call(account, kind, account=account, amount=amount)


def vote(
    txn_id: str, part: int, ok: bool = True, results: str = "[]", epoch: int = 0, **kw: Any
) -> EngineReply:
    return EngineReply(txn_id, part, "vote", ok, results=results, epoch=epoch, **kw)


def ack(txn_id: str, part: int) -> EngineReply:
    return EngineReply(txn_id, part, "ack", True)


def rows_at(part: int, at: int | None) -> EngineReply:
    """Partition `part`'s one row (keyed by its number) of read 0.1, as of batch `at`."""
    return EngineReply("0.1", part, "rows", True, rows=f"[[[{part}], {{}}]]", at=at)


def answered(
    q: Query, ats: Sequence[int | None], timeout_ms: int = 1000
) -> tuple[Coordinator, Actions]:
    """A fresh coordinator asked `q`, and partition p answered its row as of batch `ats[p]`,
    in partition order: the coordinator, and its actions on the last answer."""
    c = coordinator()
    c.request(query(q, timeout_ms), now=1.0)
    acts = Actions()
    for p, at in enumerate(ats):
        acts = c.reply(rows_at(p, at), 1.1)
    return c, acts


def read(q: Query) -> EngineRequest:
    """The engine request of read 0.1 for `q`."""
    return EngineRequest("0.1", 0, "read", "req-1", CLIENT, [], q)


def test_single_partition_is_one_run_request_without_log() -> None:
    c = coordinator()
    a, b = key_on(1), key_on(1, 1)
    frags = [move("debit", a), move("credit", b)]
    acts = c.request(txn(*frags), now=10.0)
    assert acts.requests == [(1, EngineRequest("0.1", 0, "run", "req-1", CLIENT, frags))]
    assert (acts.log, acts.results, acts.decisions, c.active) == ([], [], [], {})
    ok = EngineReply(
        "0.1", 1, "result", True, results="[95, 105]", request_id="req-1", reply_to=CLIENT
    )
    res = TxnResult("req-1", "0.1", "committed", results="[95, 105]", partitions=[1])
    assert c.reply(ok, 10.5).results == [(CLIENT, res)]
    no = EngineReply("0.2", 1, "result", False, "constraint_violation", "x", "[]", "[]", "r2", "c2")
    assert c.reply(no, 11.0).results == [
        ("c2", TxnResult("r2", "0.2", "aborted", "constraint_violation", "x", "[]", "[]", [1]))
    ]


def start_2pc(c: Coordinator, now: float = 10.0) -> str:
    """Fragments on partitions 2, 0, 2, 1 (request order), so participants [0, 1, 2]."""
    frags = [
        move("debit", key_on(2)),
        move("credit", key_on(0)),
        move("credit", key_on(2, 1)),
        move("credit", key_on(1)),
    ]
    c.request(txn(*frags), now)
    (txn_id,) = c.active
    return txn_id


def test_multi_partition_begins_logs_and_prepares_each_participant() -> None:
    c = coordinator()
    frags = [move("debit", key_on(2)), move("credit", key_on(0)), move("credit", key_on(2, 1))]
    acts = c.request(txn(*frags), now=10.0)
    begin = CoordinatorLog("begin", 0, "0.1", [0, 2], request_id="req-1", reply_to=CLIENT)
    assert acts.log == [begin]
    assert acts.requests == [
        (0, EngineRequest("0.1", 0, "prepare", "req-1", CLIENT, [frags[1]])),
        (2, EngineRequest("0.1", 0, "prepare", "req-1", CLIENT, [frags[0], frags[2]])),
    ]
    assert (acts.results, acts.decisions) == ([], [])


def test_all_yes_commits_with_results_in_request_order_then_ends_on_acks() -> None:
    c = coordinator()
    t = start_2pc(c)
    assert not c.reply(vote(t, 2, results='["a", "c"]'), 10.1)
    assert not c.reply(vote(t, 0, results='["b"]'), 10.2)
    acts = c.reply(vote(t, 1, results='["d"]'), 10.3)
    results = '["a", "b", "c", "d"]'
    assert acts.log == [
        CoordinatorLog("decision", 0, t, [0, 1, 2], True, "", "req-1", CLIENT, results)
    ]
    assert acts.results == [
        (CLIENT, TxnResult("req-1", t, "committed", "", "", results, partitions=[0, 1, 2]))
    ]
    assert acts.decisions == [(p, Decision(t, 0, True)) for p in (0, 1, 2)]
    assert acts.requests == []
    assert not c.reply(ack(t, 0), 10.4) and not c.reply(ack(t, 2), 10.5)
    end = c.reply(ack(t, 1), 10.6)
    assert end.log == [CoordinatorLog("end", 0, t, [0, 1, 2], True)]
    assert t not in c.active and c.outcomes[t] is True


def test_a_no_vote_aborts_with_its_reason_and_later_inquiries_get_abort() -> None:
    c = coordinator()
    t = start_2pc(c)
    c.reply(vote(t, 0, results='["b"]'), 10.1)
    acts = c.reply(vote(t, 2, False, reason="constraint_violation", detail="overdrawn"), 10.2)
    assert acts.log == [
        CoordinatorLog(
            "decision", 0, t, [0, 1, 2], False, "constraint_violation", "req-1", CLIENT, "[]"
        )
    ]
    ((to, res),) = acts.results
    assert (to, res.status, res.reason) == (CLIENT, "aborted", "constraint_violation")
    assert (res.detail, res.results, res.partitions) == ("partition 2: overdrawn", "[]", [0, 1, 2])
    assert acts.decisions == [(p, Decision(t, 0, False)) for p in (0, 1, 2)]
    late = c.reply(vote(t, 1), 10.3)  # a vote after the decision gets the decision again
    assert (late.log, late.results, late.decisions) == ([], [], [(1, Decision(t, 0, False))])
    for p in (0, 1, 2):
        c.reply(ack(t, p), 10.4)
    assert t not in c.active and c.outcomes[t] is False
    inquiry = c.reply(vote(t, 2), 10.5)  # after the end: answered from the outcome
    assert inquiry.decisions == [(2, Decision(t, 0, False))]


def test_timeout_aborts_naming_the_missing_partition() -> None:
    c = coordinator()
    t = start_2pc(c, now=10.0)  # timeout 1000 ms: deadline 11.0
    c.reply(vote(t, 0), 10.1)
    c.reply(vote(t, 2), 10.2)
    assert not c.tick(10.99)
    acts = c.tick(11.0)
    assert [(r.kind, r.commit, r.reason) for r in acts.log] == [("decision", False, "timeout")]
    ((to, res),) = acts.results
    assert (to, res.status, res.reason) == (CLIENT, "aborted", "timeout")
    assert res.detail == "no vote from partitions [1] in time"
    assert acts.decisions == [(p, Decision(t, 0, False)) for p in (0, 1, 2)]


def test_unacked_decision_is_resent_only_to_partitions_that_did_not_ack() -> None:
    c = coordinator()
    t = start_2pc(c)
    for p in (0, 1, 2):
        c.reply(vote(t, p, results='["x", "y"]'), 20.0)  # decided at 20.0: resend at 22.0
    c.reply(ack(t, 1), 20.5)
    assert not c.tick(21.99)
    again = c.tick(22.0)
    assert again.decisions == [(0, Decision(t, 0, True)), (2, Decision(t, 0, True))]
    assert (again.log, again.requests, again.results) == ([], [], [])
    assert not c.tick(23.0), "the next resend is resend_s after the last one"
    assert c.tick(24.0).decisions == [(0, Decision(t, 0, True)), (2, Decision(t, 0, True))]


def test_recovery_takes_a_new_epoch_aborts_undecided_and_resends_decided() -> None:
    c = coordinator()
    log = [
        CoordinatorLog("epoch", 1),
        CoordinatorLog("begin", 1, "1.1", [0, 2], request_id="ra", reply_to="ca"),
        CoordinatorLog("begin", 1, "1.2", [1, 2], request_id="rb", reply_to="cb"),
        CoordinatorLog("decision", 1, "1.2", [1, 2], True, "", "rb", "cb", "[1, 2]"),
        CoordinatorLog("begin", 1, "1.3", [0, 1], request_id="rc", reply_to="cc"),
        CoordinatorLog("decision", 1, "1.3", [0, 1], True, "", "rc", "cc", "[]"),
        CoordinatorLog("end", 1, "1.3", [0, 1], True),
    ]
    acts = c.recover(enumerate(log), now=50.0)
    assert c.epoch == 2
    assert acts.log == [
        CoordinatorLog("epoch", 2),
        CoordinatorLog("decision", 2, "1.1", [0, 2], False, "coordinator_restart", "ra", "ca"),
    ]
    assert [(to, r.request_id, r.txn_id, r.status, r.reason) for to, r in acts.results] == [
        ("ca", "ra", "1.1", "aborted", "coordinator_restart")
    ], "only the undecided transaction gets a client result"
    assert acts.decisions == [  # at the epoch of their prepares, not the new one
        (0, Decision("1.1", 1, False)),
        (2, Decision("1.1", 1, False)),
        (1, Decision("1.2", 1, True)),
        (2, Decision("1.2", 1, True)),
    ]
    assert set(c.active) == {"1.1", "1.2"}
    new = c.request(txn(move("debit", key_on(0)), move("credit", key_on(1))), 51.0)
    assert new.log[0].txn_id.startswith("2.") and new.log[0].epoch == 2
    assert c.tick(52.5).decisions[0] == (0, Decision("1.1", 1, False)), "resent: same epoch"
    # inquiries: ended committed in the log -> commit; never heard of -> presumed abort;
    # each at the epoch the vote names, its prepare's
    assert c.reply(vote("1.3", 1, epoch=1), 52.0).decisions == [(1, Decision("1.3", 1, True))]
    assert c.reply(vote("7.7", 0, epoch=7), 52.0).decisions == [(0, Decision("7.7", 7, False))]


def log_actions(c: Coordinator, acts: Actions, log: list[CoordinatorLog]) -> None:
    """What the runtime does after committing: append the log records, report offsets."""
    for record in acts.log:
        log.append(record)
        c.logged(record, len(log) - 1)


def test_nothing_logged_means_nothing_to_truncate() -> None:
    assert coordinator().truncation_point() is None


def test_truncation_point_is_the_oldest_open_begin_else_the_newest_record() -> None:
    c, log = coordinator(), list[CoordinatorLog]()
    log_actions(c, c.recover([], 1.0), log)  # the epoch record, at 0
    assert c.truncation_point() == 0, "the epoch record stays while it is the newest"
    frags = [move("debit", key_on(0)), move("credit", key_on(1))]
    log_actions(c, c.request(txn(*frags), 2.0), log)  # t1 begins at 1
    log_actions(c, c.request(txn(*frags), 2.1), log)  # t2 begins at 2
    t1, t2 = c.active
    assert c.truncation_point() == 1
    for p in (0, 1):
        log_actions(c, c.reply(vote(t1, p, epoch=1), 3.0), log)  # t1 decided at 3
    assert c.truncation_point() == 1, "a decided transaction is open until every ack"
    for p in (0, 1):
        log_actions(c, c.reply(ack(t1, p), 3.1), log)  # t1 ends at 4
    assert c.truncation_point() == 2, "t2, still undecided, keeps its begin"
    c.request(txn(*frags), 4.0)  # t3's begin, not yet committed: it will come after 4
    assert c.truncation_point() == 2
    for p in (0, 1):
        log_actions(c, c.reply(vote(t2, p, ok=False, reason="conflict"), 5.0), log)
        log_actions(c, c.reply(ack(t2, p), 5.1), log)  # t2 aborted and ended
    assert c.truncation_point() == len(log) - 1, "t3 not logged yet: keep the newest record"


def test_recovery_after_truncation_gives_the_same_state_and_epoch() -> None:
    c, log = coordinator(), list[CoordinatorLog]()
    log_actions(c, c.recover([], 1.0), log)
    frags = [move("debit", key_on(0)), move("credit", key_on(2))]
    for i in range(3):  # three transactions that end
        log_actions(c, c.request(txn(*frags), 2.0 + i), log)
        (t,) = c.active
        for p in (0, 2):
            log_actions(c, c.reply(vote(t, p, epoch=1), 2.1 + i), log)
        for p in (0, 2):
            log_actions(c, c.reply(ack(t, p), 2.2 + i), log)
    log_actions(c, c.request(txn(*frags), 6.0), log)  # decided, one ack short
    log_actions(c, c.request(txn(*frags), 6.1), log)  # undecided
    decided, undecided = c.active
    for p in (0, 2):
        log_actions(c, c.reply(vote(decided, p, epoch=1), 6.2), log)
    log_actions(c, c.reply(ack(decided, 0), 6.3), log)
    cut = c.truncation_point()
    assert cut is not None and cut == log.index(
        CoordinatorLog("begin", 1, decided, [0, 2], request_id="req-1", reply_to=CLIENT)
    )
    kept = list(enumerate(log))[cut:]

    whole, truncated = coordinator(), coordinator()
    whole_acts = whole.recover(enumerate(log), 10.0)
    truncated_acts = truncated.recover(kept, 10.0)
    assert truncated.epoch == whole.epoch == 2
    assert truncated_acts.log == whole_acts.log
    assert (
        truncated_acts.decisions
        == whole_acts.decisions
        == [
            (0, Decision(decided, 1, True)),
            (2, Decision(decided, 1, True)),
            (0, Decision(undecided, 1, False)),
            (2, Decision(undecided, 1, False)),
        ]
    )
    assert set(truncated.active) == set(whole.active) == {decided, undecided}
    assert truncated.truncation_point() == whole.truncation_point() == cut


def test_truncating_an_idle_log_keeps_the_epoch() -> None:
    c, log = coordinator(), [CoordinatorLog("epoch", 4)]
    c.recover(enumerate(log), 1.0)
    log_actions(c, Actions(log=[CoordinatorLog("epoch", c.epoch)]), log)
    cut = c.truncation_point()
    assert cut == 1
    again = coordinator()
    again.recover(list(enumerate(log))[cut:], 2.0)
    assert again.epoch == 6, "the successor still takes a higher epoch than any before"


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (txn(Fragment.call(1, "steal")), "'steal'"),
        (txn(Fragment('{"a": 1}', "debit", "{}")), '{"a": 1}'),
        (txn(Fragment("[1]", "debit", "[2]")), "parameters must be a JSON object"),
        (txn(), "at least one fragment"),
        (txn(move("debit", 1), timeout_ms=0), "not 0"),
        (query(Query("nope")), "'nope'"),
        (query(Query("accounts", "dirty")), "'dirty'"),
        (query(Query("accounts", aggregates='[["avg", "b"]]')), "'avg'"),
        (
            txn(Fragment.call(1, "debit", account=1)),
            "fragment debit: parameter 'amount' is missing",
        ),
        (txn(move("credit", 1), Fragment.call(1, "debit", account=1, amount=1, to=2)), "'to'"),
        (txn(Fragment.call(1, "debit", account=1, amount="5")), "parameter 'amount'"),
        (txn(Fragment.call(1, "open_accounts", accounts=[1, "a"])), "'accounts'[1]"),
    ],
)
def test_bad_requests_fail_naming_the_bad_input(request_: TxnRequest, named: str) -> None:
    c = coordinator()
    acts = c.request(request_, now=1.0)
    ((to, res),) = acts.results
    assert (to, res.request_id, res.status) == (CLIENT, "req-1", "failed")
    assert res.reason == "bad_request"
    assert named in res.detail
    assert (acts.log, acts.requests, c.active, c.reads) == ([], [], {}, {})


@pytest.mark.parametrize("bad", ["[1,", "not json"])
def test_bad_request_for_a_non_json_key_names_the_key(bad: str) -> None:
    acts = coordinator().request(txn(Fragment(bad, "debit", "{}")), now=1.0)
    detail = acts.results[0][1].detail
    assert "key" in detail and repr(bad) in detail, detail


def test_keyed_query_goes_to_the_owning_partition_only() -> None:
    c = coordinator()
    k = key_on(2)
    q = Query("accounts", "read_committed", key_json((k,)))
    acts = c.request(query(q), now=1.0)
    assert acts.requests == [(2, read(q))]
    rows = f'[[[{k}], {{"balance": 7}}]]'
    done = c.reply(EngineReply("0.1", 2, "rows", True, rows=rows), 1.1)
    assert done.results == [
        (CLIENT, TxnResult("req-1", "0.1", "committed", rows=rows, partitions=[2]))
    ]
    assert c.reads == {}


def test_scan_goes_everywhere_and_merges_rows_in_key_order() -> None:
    c = coordinator()
    q = Query("accounts")
    acts = c.request(query(q), now=1.0)
    assert [(p, r.kind, r.query) for p, r in acts.requests] == [(p, "read", q) for p in (0, 1, 2)]
    assert not c.reply(EngineReply("0.1", 2, "rows", True, rows='[[[9], {}], [["b"], {}]]'), 1.1)
    assert not c.reply(EngineReply("0.1", 0, "rows", True, rows='[[[3], {}], [["a"], {}]]'), 1.2)
    done = c.reply(EngineReply("0.1", 1, "rows", True, rows="[[[12], {}]]"), 1.3)
    ((_, res),) = done.results
    assert res.status == "committed" and res.partitions == [0, 1, 2]
    assert [k for k, _ in res.table_rows()] == [(3,), (9,), (12,), ("a",), ("b",)]


def test_a_failed_partition_fails_the_read_and_later_rows_are_ignored() -> None:
    c = coordinator()
    c.request(query(Query("accounts")), now=1.0)
    c.reply(EngineReply("0.1", 0, "rows", True, rows="[]"), 1.1)
    acts = c.reply(EngineReply("0.1", 1, "rows", False, "bad_query", "no field 'x'"), 1.2)
    assert acts.results == [
        (CLIENT, TxnResult("req-1", "0.1", "failed", "bad_query", "no field 'x'"))
    ]
    assert not c.reply(EngineReply("0.1", 2, "rows", True, rows="[]"), 1.3)


def test_read_timeout_fails_naming_the_silent_partitions() -> None:
    c = coordinator()
    c.request(query(Query("accounts"), 500), now=1.0)
    c.reply(EngineReply("0.1", 1, "rows", True, rows="[]"), 1.1)
    assert not c.tick(1.49)
    acts = c.tick(1.5)
    ((to, res),) = acts.results
    assert (to, res.txn_id, res.status, res.reason) == (CLIENT, "0.1", "failed", "timeout")
    assert res.detail == "no rows from partitions [0, 2] in time"
    assert c.reads == {} and not c.tick(9.0)


def test_aggregates_from_every_partition_are_combined() -> None:
    c = coordinator()
    q = Query("accounts", aggregates='[["count", ""], ["sum", "balance"], ["max", "balance"]]')
    c.request(query(q), now=1.0)
    for p, (n, total, top) in enumerate([(2, 150, 100), (0, 0, None), (1, 30, 30)]):
        part = {"count": n, "sum_balance": total, "max_balance": top}
        acts = c.reply(EngineReply("0.1", p, "rows", True, rows=json.dumps([[["*"], part]])), 1.1)
    ((_, res),) = acts.results
    assert res.table_rows() == [(("*",), {"count": 3, "sum_balance": 180, "max_balance": 100})]


@pytest.mark.parametrize(
    "reply_to",
    [
        TOPICS.decisions,
        TOPICS.requests,
        TOPICS.replies,
        TOPICS.coordinator_log,
        TOPICS.changelog,
        TOPICS.commits,
        TOPICS.oltp_in,
        AppTopics("other").oltp_out,
        CLIENT + ".mine",
        "",
    ],
)
def test_a_reply_to_other_than_the_client_reply_topic_is_refused(reply_to: str) -> None:
    c = coordinator()
    for request_ in (
        TxnRequest("1.1", reply_to, 1000, [move("debit", key_on(0))]),
        TxnRequest("1.1", reply_to, 0, []),  # a bad request is not answered there either
        TxnRequest("1.1", reply_to, 1000, query=Query("accounts")),
    ):
        acts = c.request(request_, now=1.0)
        assert (acts.log, acts.requests, acts.results, acts.decisions) == ([], [], [], [])
        ((refused, why),) = acts.refused
        assert refused is request_ and repr(reply_to) in why and CLIENT in why
    assert c.counts == {"refused_reply_to": 3}
    assert (c.active, c.reads) == ({}, {})
    assert c.request(txn(move("debit", key_on(0))), now=2.0).requests, "the client topic works"


def test_serializable_scan_asks_the_engines_behind_again_as_of_the_newest_batch() -> None:
    c = coordinator()
    q = Query("accounts", "serializable", aggregates='[["sum", "balance"]]')
    c.request(query(q), now=1.0)
    rows = '[[["*"], {"sum_balance": %d}]]'
    assert not c.reply(EngineReply("0.1", 0, "rows", True, rows=rows % 10, at=40), 1.1)
    assert not c.reply(EngineReply("0.1", 1, "rows", True, rows=rows % 99, at=37), 1.2)
    again = c.reply(EngineReply("0.1", 2, "rows", True, rows=rows % 99, at=39), 1.3)
    q40 = Query("accounts", "serializable", aggregates=q.aggregates, at=40)
    assert again.requests == [(p, read(q40)) for p in (1, 2)]
    assert not again.results
    assert not c.reply(EngineReply("0.1", 2, "rows", True, rows=rows % 5, at=40), 1.4)
    done = c.reply(EngineReply("0.1", 1, "rows", True, rows=rows % 7, at=40), 1.5)
    ((_, res),) = done.results
    assert (res.status, res.at) == ("committed", 40)
    assert res.table_rows() == [(("*",), {"sum_balance": 22})]


def test_read_committed_merges_rows_as_each_engine_answered() -> None:
    _, acts = answered(Query("accounts", "read_committed"), (40, 37, None))
    ((_, res),) = acts.results
    assert not acts.requests and res.at is None and len(res.table_rows()) == 3


def test_a_snapshot_cuts_at_the_oldest_batch_and_the_engines_ahead_go_back() -> None:
    c, acts = answered(Query("accounts", "snapshot"), (40, 37, 39))
    q37 = Query("accounts", "snapshot", at=37)
    assert acts.requests == [(p, read(q37)) for p in (0, 2)]
    for p in (2, 0):
        acts = c.reply(rows_at(p, 37), 1.2)
    ((_, res),) = acts.results
    assert (res.status, res.at, len(res.table_rows())) == ("committed", 37, 3)


def test_unknown_isolation_is_a_bad_request_naming_the_choices() -> None:
    acts = coordinator().request(query(Query("accounts", "linearizable")), now=1.0)
    ((_, res),) = acts.results
    assert res.reason == "bad_request"
    assert "'linearizable'" in res.detail and "serializable" in res.detail


def test_an_engine_past_the_cut_is_asked_for_its_newest_batch_which_moves_the_cut() -> None:
    q = Query("accounts", "serializable")
    c, acts = answered(q, (40, 37, 40))
    assert [p for p, _ in acts.requests] == [1]
    # partition 1 restarted past batch 40 and keeps no before-images from before it
    acts = c.reply(EngineReply("0.1", 1, "rows", False, "too_old", "batch 40 ...", at=40), 1.2)
    assert acts.requests == [(1, read(q))]
    acts = c.reply(rows_at(1, 45), 1.3)
    q45 = Query("accounts", "serializable", at=45)
    assert sorted(acts.requests) == [(p, read(q45)) for p in (0, 2)]
    for p in (0, 2):
        acts = c.reply(rows_at(p, 45), 1.4)
    ((_, res),) = acts.results
    assert (res.status, res.at, len(res.table_rows())) == ("committed", 45, 3)


def test_a_late_refusal_of_an_earlier_cut_is_not_another_restart() -> None:
    """An engine's refusal of cut 37 may come more than once (its request was sent again):
    after the first, the query has moved on, and the others must not use up its retries
    (seen in the simulation of cuts: a snapshot failed without any crash)."""
    c, acts = answered(Query("accounts", "snapshot"), (40, 37, 39))
    refusal = EngineReply("0.1", 0, "rows", False, "too_old", "batch 37 ...", at=37)
    acts = c.reply(refusal, 1.2)
    assert acts.requests == [(0, read(Query("accounts", "snapshot")))]
    for _ in range(3):
        acts = c.reply(refusal, 1.3)
        assert not acts.requests and not acts.results
    acts = c.reply(rows_at(2, 37), 1.4)
    acts = c.reply(rows_at(0, 41), 1.5)
    q41 = Query("accounts", "snapshot", at=41)
    assert sorted(acts.requests) == [(p, read(q41)) for p in (1, 2)]


def test_a_serializable_read_gives_up_after_three_restarts_past_the_cut() -> None:
    c = coordinator()
    c.request(query(Query("accounts", "serializable", key=key_json((key_on(0),)))), now=1.0)
    for _ in range(3):
        acts = c.reply(EngineReply("0.1", 0, "rows", False, "too_old", "gone"), 1.1)
        assert len(acts.requests) == 1 and not acts.results
    acts = c.reply(EngineReply("0.1", 0, "rows", False, "too_old", "gone"), 1.2)
    ((_, res),) = acts.results
    assert (res.status, res.reason) == ("failed", "too_old")


def test_engines_that_lost_a_held_read_are_asked_again_until_the_deadline() -> None:
    c, _ = answered(Query("accounts", "serializable"), (9, 9, 4), timeout_ms=10_000)  # resend 2 s
    assert not c.tick(2.9).requests
    q9 = Query("accounts", "serializable", at=9)
    assert c.tick(3.0).requests == [(2, read(q9))]
    assert not c.tick(4.0).requests  # not again before another resend_s
    assert c.tick(5.1).requests
    assert c.tick(11.0).results[0][1].reason == "timeout"
