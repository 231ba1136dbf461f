"""SERIALIZE (split commit, `engine/promises.py`): an engine's `promise` reply carries a
promised transaction's deltas to the aggregation constraints' running totals
(`serialize.Totals`); the coordinator commits or aborts it in the order the replies come,
logs that (`serialized`, which opens it like a begin and decides it at once) with its input
offsets, and sends the decision like a 2PC one (`two_phase`). The totals are rebuilt from
the log: `serialized` records add their deltas, a `totals` record (written now and then)
holds all of them, and the log is kept from the newest `totals` record on."""

from __future__ import annotations

import json
from collections.abc import Iterable

from txstream.model.aggregates import AggregateConstraint
from txstream.oltp.messages import CoordinatorLog, EngineReply, TxnResult
from txstream_coordinator.actions import Actions
from txstream_coordinator.context import Context
from txstream_coordinator.serialize import Totals
from txstream_coordinator.two_phase import TwoPC, TwoPhase

TOTALS_EVERY_S = 10.0  # SERIALIZE's running totals logged whole, at most this often


class Admission:
    def __init__(
        self, ctx: Context, two_phase: TwoPhase, bounds: Iterable[AggregateConstraint]
    ) -> None:
        self.ctx = ctx
        self.two_phase = two_phase
        self.totals = Totals(bounds)
        self.totals_offset: int | None = None  # of the newest totals record
        self._totals_due = 0.0

    def admit(self, rep: EngineReply, now: float, acts: Actions) -> None:
        """A promised transaction, run and held by its partition (`engine.promises`): its
        place in the serial order is now, and its final status follows from the totals as
        they stand. A commit adds its deltas; the decision goes to the partition (and
        again until acknowledged, like a 2PC decision), the status to the client and to
        the statuses topic. A BASE transaction's reply is its final status already (it
        committed on its partition, with no deltas): only published."""
        if self.two_phase.knows(rep.txn_id):
            return  # serialized already: an engine replies once per promise
        problem = None if rep.ok else (rep.reason, rep.detail)
        deltas = json.loads(rep.rows) if rep.ok else []
        if problem is None:
            problem = self.totals.problem(deltas)
        commit = problem is None
        reason, detail = problem or ("", "")
        if rep.ok and rep.kind == "promise":  # held on its partition: decided here, logged
            if commit:
                self.totals.add(deltas)
            t = TwoPC(rep.txn_id, rep.epoch, rep.request_id, rep.reply_to, [rep.partition],
                      [rep.partition], now, commit=commit)  # fmt: skip
            self.two_phase.open(t)
            logged = CoordinatorLog("serialized", self.ctx.epoch, t.txn_id, t.participants,
                                    commit, reason, t.request_id, t.reply_to, rep.rows)  # fmt: skip
            acts.log.append(logged)
            self.two_phase.send_decision(t, t.participants, now, acts)
        status = "committed" if commit else "aborted"
        self.ctx.count(f"{rep.kind}_{status}" if commit else f"{rep.kind}_aborted_{reason}")
        result = TxnResult(rep.request_id, rep.txn_id, status, reason, detail,
                           rep.results if commit else "[]", partitions=[rep.partition])  # fmt: skip
        acts.statuses.append(result)
        if self.ctx.topics.reply_problem(rep.reply_to) is None:  # a client chose it: checked
            acts.results.append((rep.reply_to, result))

    def tick(self, now: float, acts: Actions) -> None:
        """Log the totals whole once they have changed, at most every `TOTALS_EVERY_S`, so
        the log before them may go."""
        if self.totals.changed and now >= self._totals_due:
            self._totals_due = now + TOTALS_EVERY_S
            acts.log.append(CoordinatorLog("totals", self.ctx.epoch, results=self.totals.dump()))

    def kept_from(self) -> int | None:
        """The offset from which the totals need the log (the newest totals record, and
        every delta since), or None while there are no totals to keep."""
        return (self.totals_offset or 0) if self.totals.values else None
