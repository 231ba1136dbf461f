"""A client's bound on requests in flight: a send past it waits for an answer, and one
that waits too long fails naming the bound."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from txstream.in_flight import InFlight, InFlightFull


def test_a_send_past_the_bound_waits_until_an_answer_frees_a_place() -> None:
    bound = InFlight(2, timeout_s=30)
    first: Future[int] = bound.hold(Future)
    bound.hold(Future)
    third: list[Future[int]] = []
    sender = threading.Thread(target=lambda: third.append(bound.hold(Future)))
    sender.start()
    sender.join(0.2)
    assert sender.is_alive() and not third, "the third send waits"
    first.set_result(1)  # an answer
    sender.join(30)
    assert len(third) == 1 and bound.outstanding == 2 and bound.peak == 2


def test_a_full_client_with_no_answer_fails_naming_its_bound() -> None:
    bound = InFlight(1, timeout_s=0.05)
    bound.hold(Future)
    with pytest.raises(InFlightFull, match="1 requests of this client are in flight"):
        bound.hold(Future)
    assert bound.outstanding == 1


def test_a_send_that_fails_frees_its_place() -> None:
    bound = InFlight(1, timeout_s=0.05)

    def broken() -> Future[int]:
        raise RuntimeError("no broker")

    with pytest.raises(RuntimeError):
        bound.hold(broken)
    bound.hold(Future)  # the place is free again
    assert bound.outstanding == 1


def test_the_bound_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="max_in_flight 0"):
        InFlight(0, 1)
