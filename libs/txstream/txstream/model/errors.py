"""Errors users see: each names the declaration or input at fault."""

from __future__ import annotations

import traceback


class DataflowError(ValueError):
    """The declared dataflow is not a valid DAG of procedures over streams."""


class TxnAbort(Exception):
    """Raised by `ctx.abort(reason)`: the transaction execution rolls back, nothing persists."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class ConstraintViolation(TxnAbort):
    """A table write broke a declared per-key constraint; it aborts like a user abort."""

    def __init__(self, table: str, constraint: str, key: tuple[object, ...]) -> None:
        super().__init__("constraint_violation", f"{table}{list(key)} violates {constraint}")
        self.table = table
        self.constraint = constraint


class StateUnavailable(Exception):
    """Committed state could not be read or written (a damaged or full disk, say).

    Not the procedure's fault, so never turned into an abort: the engine stops and
    restarts from what Kafka committed.
    """


def exception_detail(e: BaseException) -> str:
    """An unexpected exception in user code, as the abort's detail: type and message."""
    return "".join(traceback.format_exception_only(e)).strip()
