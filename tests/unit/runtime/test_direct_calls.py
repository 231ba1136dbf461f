"""`TaskCalls`: direct transactions sent to the endpoint run in the order they came, wait
(all after them too) while the engine cannot take one, and are answered only once the group
holding them is committed, every call of a request id with its first answer."""

from __future__ import annotations

import pytest

from txstream.oltp.messages import ENDPOINT_REPLY, EngineRequest, TxnResult
from txstream.runtime.direct_calls import MAX_WAITING, CallRefused, Reply, TaskCalls
from txstream.runtime.reads import TaskClosed


def call(request_id: str) -> EngineRequest:
    return EngineRequest(f"P0.{request_id}", 0, "direct", request_id, ENDPOINT_REPLY, [])


def committed(request_id: str, status: str = "committed") -> tuple[str, TxnResult]:
    return ENDPOINT_REPLY, TxnResult(request_id, f"P0.{request_id}", status)


class Answers:
    def __init__(self) -> None:
        self.got: dict[str, list[TxnResult | BaseException]] = {}

    def to(self, name: str) -> Reply:
        return lambda answer: self.got.setdefault(name, []).append(answer)

    def status(self, name: str) -> str:
        (answer,) = self.got[name]
        assert isinstance(answer, TxnResult), answer
        return answer.status


def test_calls_run_in_order_and_are_answered_only_when_their_group_commits() -> None:
    calls, answers, ran = TaskCalls(), Answers(), []
    for rid in ("a", "b", "c"):
        calls.ask(call(rid), answers.to(rid))
    assert calls.waiting and calls.recent

    def apply(r: EngineRequest) -> bool:
        ran.append(r.request_id)
        return True

    assert calls.run(apply) == 3
    assert ran == ["a", "b", "c"] and not calls.waiting
    assert answers.got == {}, "nothing answered before its commit"

    calls.committed([committed("a"), committed("b", "aborted")])
    assert (answers.status("a"), answers.status("b")) == ("committed", "aborted")
    assert "c" not in answers.got
    calls.committed([committed("c")])
    assert answers.status("c") == "committed"


def test_a_call_the_engine_cannot_take_yet_waits_with_those_after_it() -> None:
    calls, answers = TaskCalls(), Answers()
    for rid in ("a", "b"):
        calls.ask(call(rid), answers.to(rid))
    assert calls.run(lambda r: False) == 0, "a conflict: nothing ran, in order"
    assert calls.waiting
    assert calls.run(lambda r: True) == 2


def test_a_call_waiting_for_a_decision_does_not_keep_the_task_from_waiting_for_input() -> None:
    """Only calls not yet tried make the task poll without waiting: one that waits for a
    2PC decision waits for input (the decision), or the task would spin."""
    calls = TaskCalls()
    assert not calls.new
    calls.ask(call("a"), lambda answer: None)
    assert calls.new and calls.waiting
    calls.run(lambda r: False)
    assert calls.waiting and not calls.new
    calls.ask(call("b"), lambda answer: None)
    assert calls.new


def test_a_call_the_engine_refuses_is_answered_with_the_error_and_the_rest_go_on() -> None:
    calls, answers = TaskCalls(), Answers()
    calls.ask(call("bad"), answers.to("bad"))
    calls.ask(call("good"), answers.to("good"))

    def apply(r: EngineRequest) -> bool:
        if r.request_id == "bad":
            raise ValueError("unknown procedure 'nope'")
        return True

    assert calls.run(apply) == 1
    assert isinstance(answers.got["bad"][0], ValueError)
    calls.committed([committed("good")])
    assert answers.status("good") == "committed"


def test_a_resend_of_a_request_still_in_flight_takes_the_first_answer() -> None:
    calls, answers = TaskCalls(), Answers()
    calls.ask(call("a"), answers.to("first"))
    calls.run(lambda r: True)
    calls.ask(call("a"), answers.to("resent"))  # the client's connection broke meanwhile
    calls.run(lambda r: True)
    calls.committed([committed("a")])
    assert answers.got["first"] == answers.got["resent"]


def test_closing_fails_every_call_not_answered_and_refuses_new_ones() -> None:
    calls, answers = TaskCalls(), Answers()
    calls.ask(call("ran"), answers.to("ran"))
    calls.run(lambda r: True)
    calls.ask(call("queued"), answers.to("queued"))
    calls.close()
    calls.ask(call("late"), answers.to("late"))
    for name in ("ran", "queued", "late"):
        assert isinstance(answers.got[name][0], TaskClosed), name


def test_a_task_that_takes_no_calls_says_why_and_a_full_one_is_busy() -> None:
    answers = Answers()
    TaskCalls("recovers from its command log").ask(call("a"), answers.to("a"))
    assert isinstance(answers.got["a"][0], CallRefused)
    assert "command log" in str(answers.got["a"][0])

    full = TaskCalls()
    for i in range(MAX_WAITING):
        full.ask(call(str(i)), lambda answer: None)
    full.ask(call("one more"), answers.to("more"))
    assert isinstance(answers.got["more"][0], RuntimeError) and "wait here" in str(
        answers.got["more"][0]
    )


def test_only_a_direct_transaction_answered_on_the_endpoint_is_a_call() -> None:
    with pytest.raises(ValueError, match="reply_to"):
        TaskCalls().ask(EngineRequest("P0.a", 0, "direct", "a", "app.oltp.out", []), print)
