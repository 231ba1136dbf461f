"""What a client holds while it waits: a request's future, a promise, and the timeout that
says an outcome is unknown."""

from __future__ import annotations

from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from txstream.oltp.messages import TxnResult


class OltpTimeout(TimeoutError):
    """No result in time: the outcome is unknown (the coordinator or engine may still
    finish it). Call again with `request_id` to learn it: a direct transaction that ran is
    answered again, never run twice."""

    def __init__(self, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class Pending(Future[TxnResult]):
    """A request's future, with what it was sent as."""

    def __init__(self, request_id: str, partition: int | None) -> None:
        super().__init__()
        self.request_id = request_id
        self.partition = partition  # a direct transaction's partition; None: the coordinator


@dataclass(frozen=True)
class Promise:
    """A promised transaction: durable once `promised()` returns, final at `status()`."""

    request_id: str
    durable: Future[float]  # seconds from the send to the broker's acknowledgement
    final: Future[TxnResult]

    def promised(self, timeout_s: float = 30.0) -> float:
        """Wait for the promise (its partition's log has it); the seconds it took."""
        try:
            return self.durable.result(timeout_s)
        except FutureTimeout as e:
            raise OltpTimeout("the broker did not acknowledge the promise: is it up?") from e

    def status(self, timeout_s: float = 60.0) -> TxnResult:
        """Wait for the final status: committed, or aborted with the reason."""
        try:
            return self.final.result(timeout_s)
        except FutureTimeout as e:
            raise OltpTimeout("no final status yet: are the workers and coordinator up?") from e
