"""Two-phase commit across partitions: a transaction's BEGIN (naming its participants)
commits with its PREPAREs, its votes decide it, the decision goes to every participant and
again until each acknowledges it, and then its END is logged. So after a crash the log
lists every transaction that may be in doubt (`restore`: the undecided are aborted, the
decided get their decision again). A decision carries the epoch of the prepare it decides
(the begin's), however many times the coordinator restarts before every participant has
it, since a participant takes a decision only at that epoch. Ended transactions' outcomes
are kept to answer inquiries; an unknown one is presumed aborted."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from txstream.oltp.messages import (
    CoordinatorLog,
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    TxnRequest,
    TxnResult,
)
from txstream_coordinator.actions import Actions
from txstream_coordinator.context import Context

_KEPT_OUTCOMES = 1_000_000


@dataclass
class TwoPC:
    txn_id: str
    epoch: int  # of its begin and prepares: every decision on it carries this one
    request_id: str
    reply_to: str
    participants: list[int]
    placement: list[int]  # each fragment's partition, in request order
    deadline: float
    votes: dict[int, EngineReply] = field(default_factory=dict)
    commit: bool | None = None
    acks: set[int] = field(default_factory=set)
    resend_at: float = 0.0
    first_offset: int | None = None  # of its begin in the log, once logged


class TwoPhase:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.active: dict[str, TwoPC] = {}  # begun (or serialized) and not yet ended
        self.outcomes: OrderedDict[str, bool] = OrderedDict()  # ended 2PC: commit?

    def begin(
        self,
        req: TxnRequest,
        txn_id: str,
        placement: list[int],
        by_part: dict[int, list[Fragment]],
        deadline: float,
        acts: Actions,
    ) -> None:
        """Log the begin and ask each participant (the keys of `by_part`) to prepare."""
        epoch = self.ctx.epoch
        participants = list(by_part)
        t = TwoPC(txn_id, epoch, req.request_id, req.reply_to, participants, placement, deadline)
        self.active[txn_id] = t
        acts.log.append(
            CoordinatorLog(
                "begin",
                epoch,
                txn_id,
                participants,
                request_id=req.request_id,
                reply_to=req.reply_to,
            )
        )
        for p in participants:
            prepare = EngineRequest(
                txn_id, epoch, "prepare", req.request_id, req.reply_to, by_part[p]
            )
            acts.requests.append((p, prepare))

    def restore(
        self,
        begin: CoordinatorLog,
        first_offset: int,
        decision: CoordinatorLog | None,
        now: float,
        acts: Actions,
    ) -> None:
        """A transaction the log leaves open at start: aborted if undecided (its votes are
        lost), else its decision sent again to every participant."""
        participants = list(begin.participants)
        t = TwoPC(
            begin.txn_id, begin.epoch, begin.request_id, begin.reply_to, participants, [], now
        )
        t.first_offset = first_offset
        self.active[t.txn_id] = t
        if decision is None:
            self.decide(
                t,
                False,
                "coordinator_restart",
                "the coordinator restarted before deciding",
                now,
                acts,
            )
        else:
            t.commit = decision.commit
            self.send_decision(t, t.participants, now, acts)

    def knows(self, txn_id: str) -> bool:
        """Whether `txn_id` is open or among the outcomes kept."""
        return txn_id in self.active or txn_id in self.outcomes

    def open(self, t: TwoPC) -> None:
        """Follow `t`, decided elsewhere (SERIALIZE), until its participants acknowledge."""
        self.active[t.txn_id] = t

    def logged(self, txn_id: str, offset: int) -> None:
        """Its first record is committed at `offset` (it may be ended already)."""
        t = self.active.get(txn_id)
        if t is not None:
            t.first_offset = offset

    def first_offsets(self) -> list[int]:
        """Where each open transaction's records begin in the log, those logged so far."""
        return [t.first_offset for t in self.active.values() if t.first_offset is not None]

    def vote(self, rep: EngineReply, now: float, acts: Actions) -> None:
        t = self.active.get(rep.txn_id)
        if t is None:
            # An inquiry about a finished transaction (or one this log never began:
            # presumed abort). Either way the participant gets the decision again, at the
            # epoch of its prepare, which its vote names.
            commit = self.outcomes.get(rep.txn_id, False)
            acts.decisions.append((rep.partition, Decision(rep.txn_id, rep.epoch, commit)))
            return
        if t.commit is not None:
            self.send_decision(t, [rep.partition], now, acts)
            return
        t.votes[rep.partition] = rep
        if not rep.ok:
            self.decide(t, False, rep.reason, f"partition {rep.partition}: {rep.detail}", now, acts)
        elif len(t.votes) == len(t.participants):
            self.decide(t, True, "", "", now, acts)

    def decide(
        self, t: TwoPC, commit: bool, reason: str, detail: str, now: float, acts: Actions
    ) -> None:
        t.commit = commit
        results = self._results(t) if commit else "[]"
        acts.log.append(
            CoordinatorLog(
                "decision",
                self.ctx.epoch,
                t.txn_id,
                t.participants,
                commit,
                reason,
                t.request_id,
                t.reply_to,
                results,
            )
        )
        status = "committed" if commit else "aborted"
        self.ctx.count(f"2pc_{status}" if commit else f"2pc_aborted_{reason}")
        acts.results.append(
            (
                t.reply_to,
                TxnResult(
                    t.request_id,
                    t.txn_id,
                    status,
                    reason,
                    detail,
                    results,
                    partitions=t.participants,
                ),
            )
        )
        self.send_decision(t, t.participants, now, acts)

    def send_decision(self, t: TwoPC, to: Sequence[int], now: float, acts: Actions) -> None:
        assert t.commit is not None
        t.resend_at = now + self.ctx.resend_s
        for p in to:
            acts.decisions.append((p, Decision(t.txn_id, t.epoch, t.commit)))

    def ack(self, rep: EngineReply, acts: Actions) -> None:
        t = self.active.get(rep.txn_id)
        if t is None or t.commit is None:
            return
        t.acks.add(rep.partition)
        if t.acks >= set(t.participants):
            del self.active[t.txn_id]
            self.remember(t.txn_id, t.commit)
            acts.log.append(
                CoordinatorLog("end", self.ctx.epoch, t.txn_id, t.participants, t.commit)
            )

    def tick(self, now: float, acts: Actions) -> None:
        """Undecided transactions past their deadline are aborted; unacknowledged decisions
        are sent again (a lost decision must not leave a participant blocked)."""
        for t in list(self.active.values()):
            if t.commit is None and now >= t.deadline:
                missing = [p for p in t.participants if p not in t.votes]
                self.decide(
                    t, False, "timeout", f"no vote from partitions {missing} in time", now, acts
                )
            elif t.commit is not None and now >= t.resend_at:
                self.send_decision(t, [p for p in t.participants if p not in t.acks], now, acts)

    def remember(self, txn_id: str, commit: bool) -> None:
        self.outcomes[txn_id] = commit
        if len(self.outcomes) > _KEPT_OUTCOMES:
            self.outcomes.popitem(last=False)

    def _results(self, t: TwoPC) -> str:
        """Each fragment's result in request order, from the votes of its partitions."""
        per = {p: iter(json.loads(v.results)) for p, v in t.votes.items()}
        return json.dumps([next(per[p], None) for p in t.placement])
