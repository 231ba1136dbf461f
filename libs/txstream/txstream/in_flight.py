"""How many requests one client keeps outstanding: past the bound, a send waits for an
answer (back-pressure) instead of queueing without end, and says so if none comes."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any


class InFlightFull(TimeoutError):
    """No request of a full client was answered in time."""


class InFlight:
    def __init__(self, limit: int, timeout_s: float) -> None:
        if limit < 1:
            raise ValueError(f"max_in_flight {limit}: at least 1")
        self.limit, self.timeout_s = limit, timeout_s
        self._slots = threading.BoundedSemaphore(limit)
        self._count = threading.Lock()
        self.outstanding = 0
        self.peak = 0  # the most outstanding at once

    def hold(self, start: Any) -> Any:
        """Take a place, then `start()` a request, whose future frees it when done."""
        if not self._slots.acquire(timeout=self.timeout_s):
            raise InFlightFull(
                f"{self.limit} requests of this client are in flight and none was answered "
                f"in {self.timeout_s:.0f} s: are the app's workers running?"
            )
        with self._count:
            self.outstanding += 1
            self.peak = max(self.peak, self.outstanding)
        try:
            future: Future[Any] = start()
        except BaseException:
            self._free(None)
            raise
        future.add_done_callback(self._free)
        return future

    def _free(self, _: Future[Any] | None) -> None:
        with self._count:
            self.outstanding -= 1
        self._slots.release()
