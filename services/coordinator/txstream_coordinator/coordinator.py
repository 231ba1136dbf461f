"""The coordinator's decisions, as a state machine with no I/O (the runtime does Kafka):
each input (a client request, an engine reply, the passing of time, the log read at start)
yields `Actions`, which the runtime makes durable in one Kafka transaction (log records,
engine requests, client results, decisions, input offsets), so no participant ever sees a
COMMIT whose decision is not in the coordinator log. `Coordinator` validates requests,
runs single-partition transactions on their partition, and hands the rest to its parts:
`two_phase` (2PC), `admission` (SERIALIZE), `reads` (queries), `recovery` (the log at
start)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.aggregates import AggregateConstraint
from txstream.model.declarations import Transaction
from txstream.oltp.messages import (
    CoordinatorLog,
    EngineReply,
    EngineRequest,
    Fragment,
    TxnRequest,
    TxnResult,
    key_of,
)
from txstream_coordinator.actions import Actions
from txstream_coordinator.admission import Admission
from txstream_coordinator.context import Context
from txstream_coordinator.reads import Read, Reads
from txstream_coordinator.recovery import replay
from txstream_coordinator.serialize import Totals
from txstream_coordinator.two_phase import TwoPC, TwoPhase
from txstream_coordinator.validation import invalid


class Coordinator:
    """The state machine: each input in, its `Actions` out, and the state in between.

    Who wrote a decision cannot be checked here: Kafka records carry no producer identity
    a consumer can verify, short of topic ACLs. What is enforced is that no record the
    coordinator writes can be mistaken for a decision: a client's result goes only to the
    client reply topic (`AppTopics.reply_problem`), and every message carries its type on
    the wire (`txstream.oltp.messages`)."""

    def __init__(
        self,
        partitions: int,
        topics: AppTopics,
        transactions: Mapping[str, Transaction],
        tables: Iterable[str] = (),
        resend_s: float = 2.0,
        on_count: Callable[[str], None] = lambda outcome: None,
        bounds: Iterable[AggregateConstraint] = (),
    ) -> None:
        self.ctx = Context(partitions, topics, resend_s, on_count)
        self.transactions = dict(transactions)
        self.tables = set(tables)
        self._seq = 0
        self._last_logged: int | None = None  # the log offset of the newest record
        self._two_phase = TwoPhase(self.ctx)
        self._admission = Admission(self.ctx, self._two_phase, bounds)
        self._reads = Reads(self.ctx)

    @property
    def partitions(self) -> int:
        return self.ctx.partitions

    @property
    def topics(self) -> AppTopics:
        return self.ctx.topics

    @property
    def resend_s(self) -> float:
        return self.ctx.resend_s

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    @property
    def counts(self) -> dict[str, int]:
        return self.ctx.counts

    @property
    def active(self) -> dict[str, TwoPC]:
        """2PC and serialized transactions begun and not yet ended."""
        return self._two_phase.active

    @property
    def outcomes(self) -> OrderedDict[str, bool]:
        """Ended transactions, oldest first: commit?"""
        return self._two_phase.outcomes

    @property
    def reads(self) -> dict[str, Read]:
        return self._reads.open

    @property
    def totals(self) -> Totals:
        return self._admission.totals

    # -- start -----------------------------------------------------------------------

    def recover(self, records: Iterable[tuple[int, CoordinatorLog]], now: float) -> Actions:
        """Replay the log, (offset, record) in order: take a new epoch, abort the
        undecided, resend the unfinished."""
        acts = Actions()
        log = replay(records, self._admission.totals, self._two_phase.remember)
        if log.last_offset is not None:
            self._last_logged = log.last_offset
        if log.totals_offset is not None:
            self._admission.totals_offset = log.totals_offset
        self.ctx.epoch = max(self.ctx.epoch, log.epoch) + 1
        acts.log.append(CoordinatorLog("epoch", self.ctx.epoch))
        for txn_id, begin in log.begun.items():
            decision = log.decided.get(txn_id)
            self._two_phase.restore(begin, log.first[txn_id], decision, now, acts)
        return acts

    # -- the log -----------------------------------------------------------------------

    def logged(self, record: CoordinatorLog, offset: int) -> None:
        """The runtime's word that `record` (of these actions) is committed at `offset`."""
        self._last_logged = offset
        if record.kind in ("begin", "serialized"):
            self._two_phase.logged(record.txn_id, offset)
        elif record.kind == "totals":
            self._admission.totals_offset = offset

    def truncation_point(self) -> int | None:
        """The offset below which the log may be deleted (None: nothing logged yet).

        That is the first record of the oldest open transaction (and the newest totals
        record, while there are totals), or else the newest record logged, which carries
        the current epoch, so a successor still takes a higher one. A transaction whose
        begin is not logged yet comes after the newest record, so it needs no offset here.
        Call it only when every action so far is committed: then this state is exactly what
        the log replays to. What goes is ended transactions only, whose outcomes are then
        forgotten: an end is logged only once every participant has acknowledged the
        decision, so none will ask again (an unknown transaction is presumed aborted).
        """
        if self._last_logged is None:
            return None
        firsts = self._two_phase.first_offsets()
        totals = self._admission.kept_from()
        if totals is not None:
            firsts.append(totals)
        return min([*firsts, self._last_logged])

    # -- inputs ------------------------------------------------------------------------

    def request(self, req: TxnRequest, now: float) -> Actions:
        acts = Actions()
        refused = self.ctx.topics.reply_problem(req.reply_to)
        if refused is not None:
            acts.refused.append((req, refused))
            self.ctx.count("refused_reply_to")
            return acts
        txn_id = self._next_txn()
        problem = invalid(req, self.transactions, self.tables)
        if problem is not None:
            acts.results.append(
                (req.reply_to, TxnResult(req.request_id, txn_id, "failed", "bad_request", problem))
            )
            self.ctx.count("failed")
            return acts
        deadline = now + req.timeout_ms / 1000
        if req.query is not None:
            self._reads.start(req, txn_id, now, deadline, acts)
            return acts
        placement = [partition_of(key_of(f.key), self.ctx.partitions) for f in req.fragments]
        participants = sorted(set(placement))
        by_part: dict[int, list[Fragment]] = {p: [] for p in participants}
        for f, p in zip(req.fragments, placement, strict=True):
            by_part[p].append(f)
        if len(participants) == 1:
            p = participants[0]
            run = EngineRequest(
                txn_id, self.ctx.epoch, "run", req.request_id, req.reply_to, by_part[p]
            )
            acts.requests.append((p, run))
            return acts
        self._two_phase.begin(req, txn_id, placement, by_part, deadline, acts)
        return acts

    def reply(self, rep: EngineReply, now: float) -> Actions:
        acts = Actions()
        if rep.kind == "result":
            self._single(rep, acts)
        elif rep.kind == "rows":
            self._reads.rows(rep, acts)
        elif rep.kind == "vote":
            self._two_phase.vote(rep, now, acts)
        elif rep.kind == "ack":
            self._two_phase.ack(rep, acts)
        elif rep.kind in ("promise", "base"):
            self._admission.admit(rep, now, acts)
        return acts

    def tick(self, now: float) -> Actions:
        """Timeouts abort undecided transactions and fail reads; unacknowledged decisions
        are sent again (a lost decision must not leave a participant blocked)."""
        acts = Actions()
        self._two_phase.tick(now, acts)
        self._admission.tick(now, acts)
        self._reads.tick(now, acts)
        return acts

    # -- helpers -------------------------------------------------------------------------

    def _single(self, rep: EngineReply, acts: Actions) -> None:
        """A single-partition transaction's result: final as its partition ran it."""
        status = "committed" if rep.ok else "aborted"
        self.ctx.count(f"single_{status}")
        result = TxnResult(
            rep.request_id,
            rep.txn_id,
            status,
            rep.reason,
            rep.detail,
            rep.results,
            partitions=[rep.partition],
        )
        acts.results.append((rep.reply_to, result))

    def _next_txn(self) -> str:
        self._seq += 1
        return f"{self.ctx.epoch}.{self._seq}"
