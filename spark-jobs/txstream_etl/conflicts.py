"""Commits that a concurrent writer's commit refused, made again on the table's newer version.

`etl maintain` compacts the tables a running ETL writes, so two writers can commit to one
table at once: a compaction between a merge's read and its commit (delta-rs refuses the
merge), or a merge that rewrote files a compaction was rewriting (Spark refuses the
compaction). Delta refuses the later commit whole, writing no log entry, so making it
again, on the version that won, cannot apply anything twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

log = logging.getLogger("txstream.etl")
ATTEMPTS = 5  # a maintenance run commits once per table, so one more attempt usually does
T = TypeVar("T")


def retried(commit: Callable[[], T], refused: tuple[type[BaseException], ...], what: str) -> T:
    """`commit()`, made again while a concurrent commit refuses it (`refused`), up to
    ATTEMPTS times; the last refusal is raised."""

    def again(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "a concurrent Delta commit refused %s (attempt %d of %d), made again: %s",
            what, state.attempt_number, ATTEMPTS, error,
        )  # fmt: skip

    retrying = Retrying(
        retry=retry_if_exception_type(refused),
        stop=stop_after_attempt(ATTEMPTS),
        wait=wait_exponential(multiplier=0.05, max=1.0),
        before_sleep=again,
        reraise=True,
    )
    return retrying(commit)
