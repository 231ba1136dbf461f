"""When the commit pipeline starts a group's commit (`CommitPipeline.due`).

A group holding an answer a client waits on commits at the end of its run when no commit
is in flight: nothing else could join it soon, so waiting out the interval is pure latency.
While a commit is in flight the group grows instead (the broker's round trip groups the
answers), and a group of batches alone still waits its interval.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from txstream.commit.pipeline import Commit, CommitPipeline
from txstream.commit.policy import CommitPolicy
from txstream.engine.group import CommitGroup
from txstream.oltp.messages import EngineReply, TxnResult

POLICY = CommitPolicy(interval_ms=60_000, max_batches=100, busy_interval_ms=60_000)


def pipeline() -> CommitPipeline:
    p = CommitPipeline(committer=None, policy=POLICY)  # type: ignore[arg-type]
    p.opened()
    return p


def answering() -> CommitGroup:
    group = CommitGroup()
    group.results.append(("app.oltp.out", TxnResult("r0-1", "p.r0-1", "committed")))
    return group


def in_flight(p: CommitPipeline) -> Future[Any]:
    sent: Future[Any] = Future()
    p.in_flight = Commit(CommitGroup(), {}, sent)
    return sent


def test_a_clients_answer_commits_at_the_end_of_its_run_when_nothing_is_in_flight() -> None:
    p = pipeline()
    assert not p.due(answering()), "mid-run: the run's other records may join it"
    assert p.due(answering(), end_of_run=True)


def test_so_does_a_reply_the_coordinator_waits_on() -> None:
    group = CommitGroup()
    group.replies.append(EngineReply("1.2", 0, "rows", True))
    assert pipeline().due(group, end_of_run=True)


def test_a_decision_s_acknowledgement_waits_its_interval() -> None:
    """Nobody waits on an ack: committing each run's at once only costs 2PC its rate."""
    group = CommitGroup()
    group.replies.append(EngineReply("1.2", 0, "ack", True))
    assert not pipeline().due(group, end_of_run=True)
    group.replies.append(EngineReply("1.3", 0, "rows", True))
    assert pipeline().due(group, end_of_run=True)


def test_while_a_commit_is_in_flight_the_answers_wait_for_it() -> None:
    p = pipeline()
    sent = in_flight(p)
    assert not p.due(answering(), end_of_run=True)
    sent.set_result(None)
    assert p.due(answering(), end_of_run=True)


def test_with_more_input_waiting_the_group_grows_first() -> None:
    assert not pipeline().due(answering(), end_of_run=True, backlog=True)


def test_a_group_of_batches_alone_waits_its_interval() -> None:
    group = CommitGroup()
    group.stats.batches = 3
    group.ws.put("t", (1,), {"v": 1})
    assert not pipeline().due(group, end_of_run=True)
