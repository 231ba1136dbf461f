"""SERIALIZE in the coordinator (`Coordinator._serialize`, `serialize.Totals`), with explicit
times, on the inventory app's `sum(qty) >= 0 group by item`.

Covered: promises are committed in the order their replies come while the item's total
stays >= 0, and the one that would take it below is aborted naming constraint, group and
sum; a promise that failed on its partition is final at once; each status goes to the
client and the statuses topic; decisions are resent until acknowledged, then the promise
ends; the totals survive a restart from the whole log and from a log truncated below the
newest totals record, with the same later decisions.
"""

from __future__ import annotations

import json

from inventory.dataflow import NONNEGATIVE, build_app
from tests.unit.coordinator.test_coordinator_protocol import log_actions
from txstream.kafka.topics import AppTopics
from txstream.oltp.messages import CoordinatorLog, Decision, EngineReply
from txstream_coordinator.actions import Actions
from txstream_coordinator.admission import TOTALS_EVERY_S
from txstream_coordinator.coordinator import Coordinator

TOPICS = AppTopics("inventory")
CLIENT = TOPICS.oltp_out


def coordinator() -> Coordinator:
    decl = build_app().decl
    return Coordinator(4, TOPICS, decl.transactions, list(decl.tables), bounds=decl.aggregates)


def promised(txn_id: str, item: int, delta: int, part: int = 1) -> EngineReply:
    total = json.dumps(["stock", NONNEGATIVE, [item]])
    return EngineReply(txn_id, part, "promise", True, results="[0]",
                       rows=json.dumps([[total, delta]]), request_id=f"req-{txn_id}",
                       reply_to=CLIENT)  # fmt: skip


def statuses(acts: Actions) -> list[tuple[str, str, str]]:
    return [(r.txn_id, r.status, r.reason) for r in acts.statuses]


def test_promises_commit_while_the_total_holds_and_the_one_past_it_aborts() -> None:
    c = coordinator()
    c.recover([], 0.0)
    assert statuses(c.reply(promised("p.1", 7, +10), 1.0)) == [("p.1", "committed", "")]
    assert statuses(c.reply(promised("p.2", 7, -6), 1.0)) == [("p.2", "committed", "")]
    acts = c.reply(promised("p.3", 7, -5, part=2), 1.0)
    assert statuses(acts) == [("p.3", "aborted", "aggregate_constraint")]
    assert acts.statuses[0].detail == (
        "'sum(qty) >= 0 group by item' on table 'stock', group [7]: 4 - 5 = -1"
    )
    assert acts.results == [(CLIENT, acts.statuses[0])]
    assert acts.decisions == [(2, Decision("p.3", 0, False))]
    assert [r.kind for r in acts.log] == ["serialized"]
    # another item has a total of its own
    assert statuses(c.reply(promised("p.4", 8, -1), 1.0))[0][1] == "aborted"
    assert statuses(c.reply(promised("p.5", 7, -4), 1.0))[0][1] == "committed"


def test_a_promise_failed_on_its_partition_is_final_at_once() -> None:
    c = coordinator()
    acts = c.reply(EngineReply("p.9", 3, "promise", False, "no_row", "no such site",
                               request_id="req-9", reply_to=CLIENT), 1.0)  # fmt: skip
    assert statuses(acts) == [("p.9", "aborted", "no_row")]
    assert not acts.log and not acts.decisions and not c.active


def test_a_client_chosen_reply_to_gets_no_result_but_the_status_is_published() -> None:
    c = coordinator()
    rep = promised("p.1", 7, +1)
    acts = c.reply(EngineReply(**{**rep.__dict__, "reply_to": TOPICS.decisions}), 1.0)
    assert statuses(acts) == [("p.1", "committed", "")] and acts.results == []


def test_decisions_are_resent_until_acknowledged_then_the_promise_ends() -> None:
    c = coordinator()
    c.reply(promised("p.1", 7, +3), 1.0)
    assert c.tick(2.0).decisions == []
    assert c.tick(3.5).decisions == [(1, Decision("p.1", 0, True))]
    acts = c.reply(EngineReply("p.1", 1, "ack", True), 4.0)
    assert acts.log == [CoordinatorLog("end", 0, "p.1", [1], True)] and not c.active
    assert c.reply(promised("p.1", 7, +3), 4.0).statuses == []  # serialized once


def test_totals_survive_a_restart_from_a_truncated_log() -> None:
    c, log = coordinator(), list[CoordinatorLog]()
    log_actions(c, c.recover([], 0.0), log)
    for i, delta in enumerate((+5, -2, +4)):
        log_actions(c, c.reply(promised(f"p.{i}", 7, delta), 1.0), log)
        log_actions(c, c.reply(EngineReply(f"p.{i}", 1, "ack", True), 1.0), log)
    log_actions(c, c.tick(1.0 + TOTALS_EVERY_S), log)
    assert log[-1].kind == "totals" and json.loads(log[-1].results) == c.totals.values
    log_actions(c, c.reply(promised("p.3", 7, -6), 20.0), log)  # open: not acknowledged
    cut = c.truncation_point()
    assert cut == len(log) - 2, "the totals record and the open promise after it"
    for kept in (list(enumerate(log)), list(enumerate(log))[cut:]):
        fresh = coordinator()
        acts = fresh.recover(kept, 30.0)
        assert (
            fresh.totals.values == c.totals.values == {json.dumps(["stock", NONNEGATIVE, [7]]): 1}
        )
        # sent again (at the log's epoch: a promise takes its decision at any)
        assert [(p, d.txn_id, d.commit) for p, d in acts.decisions] == [(1, "p.3", True)]
        assert statuses(fresh.reply(promised("p.4", 7, -2), 31.0))[0][1] == "aborted"
        assert statuses(fresh.reply(promised("p.5", 7, -1), 31.0))[0][1] == "committed"


def test_a_base_transaction_s_reply_is_its_final_status_only_published() -> None:
    c = coordinator()
    ok = EngineReply("p.b", 2, "base", True, results="[5]", request_id="req-b", reply_to=CLIENT)
    acts = c.reply(ok, 1.0)
    assert statuses(acts) == [("p.b", "committed", "")] and acts.statuses[0].values() == [5]
    assert acts.results == [(CLIENT, acts.statuses[0])]
    assert not acts.log and not acts.decisions and not c.active and c.totals.values == {}
    failed = EngineReply("p.c", 2, "base", False, "no_site", "no site 9", request_id="req-c",
                         reply_to=CLIENT)  # fmt: skip
    assert statuses(c.reply(failed, 1.0)) == [("p.c", "aborted", "no_site")]
    assert c.counts == {"base_committed": 1, "base_aborted_no_site": 1}
