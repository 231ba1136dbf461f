"""An OLTP transaction's fragments, run in order in one write set over the group's.

Any fragment's abort aborts them all, with the fragment named. Each runs against the
declared transaction of its name, with its parameters checked against the declaration, and
every row it touches passes the caller's `guard` first (a row a prepared 2PC transaction
holds stops it with `Conflict`). The participant decides what becomes of the write set.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from txstream.engine.context import TeContext
from txstream.engine.executor import TeExecutor
from txstream.engine.ledger import BatchLedger
from txstream.engine.writeset import WriteSet
from txstream.model.declarations import Key, Procedure, Record
from txstream.model.errors import StateUnavailable, TxnAbort, exception_detail
from txstream.oltp.messages import Fragment

Guard = Callable[[str, Key | None], None]


class Conflict(Exception):
    """The transaction touched a row a prepared transaction holds; retry after its decision."""


class Uncommitted(Conflict):
    """A read met a write its client may know of that the committed state lacks yet: it can
    be answered only once a commit has been applied, not before."""


@dataclass(frozen=True)
class Failed:
    reason: str
    detail: str
    procedure: str = "<oltp>"  # the fragment that aborted, when one did


class FragmentRunner:
    def __init__(self, executor: TeExecutor, ledger: BatchLedger, guard: Guard) -> None:
        self.executor = executor
        self.ledger = ledger
        self.guard = guard

    def execute(
        self,
        fragments: Sequence[Fragment],
        basic: bool = False,
        *,
        parent: WriteSet | None = None,
        guard: Guard | None = None,
    ) -> tuple[WriteSet, str] | Failed:
        """Run the fragments in order in one write set over `parent` (default: the group's);
        any abort aborts them all. Returns the write set and the results as JSON. `basic`:
        a promised transaction (`TeContext.basic`); `guard`: instead of the runner's.
        `Conflict` propagates: nothing of it applied."""
        executor = self.executor
        decl = executor.dataflow.decl
        ws = WriteSet(self.ledger.group.ws if parent is None else parent)
        results: list[Any] = []
        for f in fragments:
            tx = decl.transactions.get(f.procedure)
            if tx is None:
                return Failed(
                    "unknown_procedure",
                    f"no transaction {f.procedure!r}; registered: {sorted(decl.transactions)}",
                )
            try:
                args = f.args()
            except ValueError as e:
                detail = f"fragment {f.procedure}: params are not JSON: {e}"
                return Failed("bad_request", detail, f.procedure)
            problem = tx.problem(args)
            if problem is not None:
                return Failed("bad_request", f"fragment {f.procedure}: {problem}", f.procedure)
            ctx = TeContext(
                Procedure(f.procedure, _no_batch, "<oltp>"),
                -1,
                ws,
                self.ledger.base,
                decl.tables,
                {},
                executor.params,
                decl.insert_triggers,
                _no_slide,
                self.guard if guard is None else guard,
                executor.flat_tables,
            )
            ctx.basic = basic
            started = time.perf_counter()
            try:
                results.append(tx.fn(ctx, args))
            except TxnAbort as e:
                return Failed(e.reason, str(e), f.procedure)
            except (StateUnavailable, Conflict):
                raise
            except Exception as e:
                return Failed("exception", exception_detail(e), f.procedure)
            if executor.timer is not None:
                executor.timer(f.procedure, time.perf_counter() - started)
        if executor.record_check is not None:
            try:
                executor.record_check(ws, [])
            except TxnAbort as e:
                return Failed(e.reason, str(e))
        try:
            return ws, json.dumps(results)
        except (TypeError, ValueError) as e:
            return Failed("result_not_json", f"a fragment returned a value JSON cannot hold: {e}")


def _no_batch(ctx: TeContext, batch: Sequence[Record]) -> None:
    raise TypeError("an OLTP transaction is called with parameters, not a batch")


def _no_slide(ctx: TeContext, window: str, slides: int) -> None:
    raise TypeError("an OLTP transaction owns no window")
