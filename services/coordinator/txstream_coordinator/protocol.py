"""The coordinator's decisions, as a state machine with no I/O (the runtime does Kafka).

Each input (a client request, an engine reply, the passing of time, the log read at start)
yields `Actions`. The runtime makes them durable in one Kafka transaction (log records,
engine requests, client results, decisions, input offsets), so no participant ever sees a
COMMIT whose decision is not in the coordinator log.
A 2PC transaction's BEGIN (naming its participants) commits with its PREPAREs, so after a
crash the log lists every transaction that may be in doubt: undecided ones are aborted,
decided ones not acknowledged by every participant get their decision again.

The log is truncated below `Coordinator.truncation_point()`: the first record of the
oldest open transaction, and never past the last record this incarnation logged, which
carries the current epoch, so a successor still takes a higher one. What goes is ended
transactions only; their outcomes are then forgotten, which is safe because an end is
logged only once every participant has acknowledged the decision and so none will ask
again (an unknown transaction is presumed aborted, as before). Truncating rather than
compacting keeps the log a plain sequence that `recover` replays unchanged.

SERIALIZE (split commit, `engine/promises.py`) runs here too: an engine's `promise` reply
carries a promised transaction's deltas to the aggregation constraints' running totals
(`serialize.Totals`); the coordinator commits or aborts it in the order the replies come,
logs that (`serialized`, which opens it like a begin and decides it at once) with its input
offsets, and sends the decision like a 2PC one. The totals are rebuilt from the log:
`serialized` records add their deltas, a `totals` record (written now and then) holds all
of them, and the log is kept from the newest `totals` record on.

A decision carries the epoch of the prepare it decides (the begin's), however many times
the coordinator restarts before every participant has it; a participant takes a decision
only at that epoch. Who wrote a decision cannot be checked here: Kafka records carry no
producer identity a consumer can verify, short of topic ACLs. What is enforced is that no
record the coordinator writes can be mistaken for a decision: a client's result goes only
to the client reply topic (`AppTopics.reply_problem`), and every message carries its type
on the wire (`txstream.oltp.messages`).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.aggregates import AggregateConstraint
from txstream.model.declarations import Transaction
from txstream.oltp.messages import (
    ISOLATIONS,
    CoordinatorLog,
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    Query,
    TxnRequest,
    TxnResult,
    key_of,
)
from txstream.oltp.predicates import aggregates_of, combine
from txstream_coordinator.serialize import Totals

_KEPT_OUTCOMES = 1_000_000
MAX_RESULT_BYTES = 900 * 1024  # a result is one Kafka record: 1 MiB by default
MAX_CUT_RETRIES = 3  # a cut read asks again an engine that could not go back to the cut
TOTALS_EVERY_S = 10.0  # SERIALIZE's running totals logged whole, at most this often


@dataclass
class Actions:
    log: list[CoordinatorLog] = field(default_factory=list)
    requests: list[tuple[int, EngineRequest]] = field(default_factory=list)
    results: list[tuple[str, TxnResult]] = field(default_factory=list)  # (reply_to, result)
    decisions: list[tuple[int, Decision]] = field(default_factory=list)
    # requests answered nowhere, since their reply_to may not take a result: (request, why)
    refused: list[tuple[TxnRequest, str]] = field(default_factory=list)
    statuses: list[TxnResult] = field(default_factory=list)  # promises' final statuses

    def __bool__(self) -> bool:
        return bool(self.log or self.requests or self.results or self.decisions or self.statuses)

    def extend(self, other: Actions) -> None:
        self.log += other.log
        self.requests += other.requests
        self.results += other.results
        self.decisions += other.decisions
        self.refused += other.refused
        self.statuses += other.statuses


@dataclass
class _TwoPC:
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


@dataclass
class _Read:
    request_id: str
    reply_to: str
    partitions: list[int]
    deadline: float
    query: Query
    rows: dict[int, list[Any]] = field(default_factory=dict)
    at: dict[int, int | None] = field(default_factory=dict)  # each partition's point
    cut: int | None = None  # a cut read: the batch the partitions not in are asked for
    retries: int = 0  # partitions asked again after a cut they could not go back to
    resend_at: float = 0.0
    newest: bool = False  # cut at the newest batch answered (serializable), else the oldest


class Coordinator:
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
        self.partitions = partitions
        self.topics = topics
        self.transactions = dict(transactions)
        self.tables = set(tables)
        self.resend_s = resend_s
        self.epoch = 0
        self._seq = 0
        self.active: dict[str, _TwoPC] = {}
        self.reads: dict[str, _Read] = {}
        self.outcomes: OrderedDict[str, bool] = OrderedDict()  # ended 2PC: commit?
        self.counts: dict[str, int] = {}
        self._on_count = on_count
        self._last_logged: int | None = None  # the log offset of the newest record
        self.totals = Totals(bounds)
        self._totals_offset: int | None = None  # of the newest totals record
        self._totals_due = 0.0

    # -- start -----------------------------------------------------------------------

    def recover(self, records: Iterable[tuple[int, CoordinatorLog]], now: float) -> Actions:
        """Replay the log, (offset, record) in order: take a new epoch, abort the
        undecided, resend the unfinished."""
        acts = Actions()
        begun: dict[str, CoordinatorLog] = {}
        first: dict[str, int] = {}
        decided: dict[str, CoordinatorLog] = {}
        for offset, r in records:
            self._last_logged = offset
            self.epoch = max(self.epoch, r.epoch)
            if r.kind in ("begin", "serialized"):
                begun[r.txn_id] = r
                first[r.txn_id] = offset
            if r.kind in ("decision", "serialized"):
                decided[r.txn_id] = r
            if r.kind == "serialized" and r.commit:
                self.totals.add(json.loads(r.results))
            elif r.kind == "totals":
                self.totals.load(r.results)
                self._totals_offset = offset
            elif r.kind == "end":
                begun.pop(r.txn_id, None)
                d = decided.pop(r.txn_id, None)
                self._remember(r.txn_id, d.commit if d is not None else r.commit)
        self.epoch += 1
        acts.log.append(CoordinatorLog("epoch", self.epoch))
        for txn_id, b in begun.items():
            t = _TwoPC(txn_id, b.epoch, b.request_id, b.reply_to, list(b.participants), [], now)
            t.first_offset = first[txn_id]
            self.active[txn_id] = t
            d = decided.get(txn_id)
            if d is None:
                self._decide(
                    t,
                    False,
                    "coordinator_restart",
                    "the coordinator restarted before deciding",
                    now,
                    acts,
                )
            else:
                t.commit = d.commit
                self._send_decision(t, t.participants, now, acts)
        return acts

    # -- the log -----------------------------------------------------------------------

    def logged(self, record: CoordinatorLog, offset: int) -> None:
        """The runtime's word that `record` (of these actions) is committed at `offset`."""
        self._last_logged = offset
        if record.kind in ("begin", "serialized"):
            t = self.active.get(record.txn_id)
            if t is not None:
                t.first_offset = offset
        elif record.kind == "totals":
            self._totals_offset = offset

    def truncation_point(self) -> int | None:
        """The offset below which the log may be deleted (None: nothing logged yet).

        That is the first record of the oldest open transaction, or else the newest record
        logged, which keeps the epoch. A transaction whose begin is not logged yet comes
        after the newest record, so it needs no offset here. Call it only when every action
        so far is committed: then this state is exactly what the log replays to.
        """
        if self._last_logged is None:
            return None
        firsts = [t.first_offset for t in self.active.values() if t.first_offset is not None]
        if self.totals.values:  # the newest whole totals, and every delta since
            firsts.append(self._totals_offset or 0)
        return min([*firsts, self._last_logged])

    # -- inputs ------------------------------------------------------------------------

    def request(self, req: TxnRequest, now: float) -> Actions:
        acts = Actions()
        refused = self.topics.reply_problem(req.reply_to)
        if refused is not None:
            acts.refused.append((req, refused))
            self._count("refused_reply_to")
            return acts
        txn_id = self._next_txn()
        problem = self._invalid(req)
        if problem is not None:
            acts.results.append(
                (req.reply_to, TxnResult(req.request_id, txn_id, "failed", "bad_request", problem))
            )
            self._count("failed")
            return acts
        deadline = now + req.timeout_ms / 1000
        if req.query is not None:
            self._read(req, txn_id, now, deadline, acts)
            return acts
        placement = [partition_of(key_of(f.key), self.partitions) for f in req.fragments]
        participants = sorted(set(placement))
        by_part: dict[int, list[Fragment]] = {p: [] for p in participants}
        for f, p in zip(req.fragments, placement, strict=True):
            by_part[p].append(f)
        if len(participants) == 1:
            p = participants[0]
            acts.requests.append(
                (
                    p,
                    EngineRequest(
                        txn_id, self.epoch, "run", req.request_id, req.reply_to, by_part[p]
                    ),
                )
            )
            return acts
        t = _TwoPC(
            txn_id, self.epoch, req.request_id, req.reply_to, participants, placement, deadline
        )
        self.active[txn_id] = t
        acts.log.append(
            CoordinatorLog(
                "begin",
                self.epoch,
                txn_id,
                participants,
                request_id=req.request_id,
                reply_to=req.reply_to,
            )
        )
        for p in participants:
            acts.requests.append(
                (
                    p,
                    EngineRequest(
                        txn_id, self.epoch, "prepare", req.request_id, req.reply_to, by_part[p]
                    ),
                )
            )
        return acts

    def reply(self, rep: EngineReply, now: float) -> Actions:
        acts = Actions()
        if rep.kind == "result":
            status = "committed" if rep.ok else "aborted"
            self._count(f"single_{status}")
            acts.results.append(
                (
                    rep.reply_to,
                    TxnResult(
                        rep.request_id,
                        rep.txn_id,
                        status,
                        rep.reason,
                        rep.detail,
                        rep.results,
                        partitions=[rep.partition],
                    ),
                )
            )
        elif rep.kind == "rows":
            self._rows(rep, acts)
        elif rep.kind == "vote":
            self._vote(rep, now, acts)
        elif rep.kind == "ack":
            self._ack(rep, acts)
        elif rep.kind in ("promise", "base"):
            self._serialize(rep, now, acts)
        return acts

    def tick(self, now: float) -> Actions:
        """Timeouts abort undecided transactions and fail reads; unacknowledged decisions
        are sent again (a lost decision must not leave a participant blocked)."""
        acts = Actions()
        for t in list(self.active.values()):
            if t.commit is None and now >= t.deadline:
                missing = [p for p in t.participants if p not in t.votes]
                self._decide(
                    t, False, "timeout", f"no vote from partitions {missing} in time", now, acts
                )
            elif t.commit is not None and now >= t.resend_at:
                self._send_decision(t, [p for p in t.participants if p not in t.acks], now, acts)
        if self.totals.changed and now >= self._totals_due:
            self._totals_due = now + TOTALS_EVERY_S
            acts.log.append(CoordinatorLog("totals", self.epoch, results=self.totals.dump()))
        for txn_id, r in list(self.reads.items()):
            if now < r.deadline and now >= r.resend_at and r.query.isolation != "read_committed":
                # an engine that restarted lost the read it held for a batch: ask again
                r.resend_at = now + self.resend_s
                self._ask(txn_id, r, [p for p in r.partitions if p not in r.rows], acts)
            if now >= r.deadline:
                del self.reads[txn_id]
                missing = [p for p in r.partitions if p not in r.rows]
                self._count("read_timeout")
                acts.results.append(
                    (
                        r.reply_to,
                        TxnResult(
                            r.request_id,
                            txn_id,
                            "failed",
                            "timeout",
                            f"no rows from partitions {missing} in time",
                        ),
                    )
                )
        return acts

    # -- 2PC -----------------------------------------------------------------------------

    def _vote(self, rep: EngineReply, now: float, acts: Actions) -> None:
        t = self.active.get(rep.txn_id)
        if t is None:
            # An inquiry about a finished transaction (or one this log never began:
            # presumed abort). Either way the participant gets the decision again, at the
            # epoch of its prepare, which its vote names.
            commit = self.outcomes.get(rep.txn_id, False)
            acts.decisions.append((rep.partition, Decision(rep.txn_id, rep.epoch, commit)))
            return
        if t.commit is not None:
            self._send_decision(t, [rep.partition], now, acts)
            return
        t.votes[rep.partition] = rep
        if not rep.ok:
            self._decide(
                t, False, rep.reason, f"partition {rep.partition}: {rep.detail}", now, acts
            )
        elif len(t.votes) == len(t.participants):
            self._decide(t, True, "", "", now, acts)

    def _decide(
        self, t: _TwoPC, commit: bool, reason: str, detail: str, now: float, acts: Actions
    ) -> None:
        t.commit = commit
        results = self._results(t) if commit else "[]"
        acts.log.append(
            CoordinatorLog(
                "decision",
                self.epoch,
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
        self._count(f"2pc_{status}" if commit else f"2pc_aborted_{reason}")
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
        self._send_decision(t, t.participants, now, acts)

    def _send_decision(self, t: _TwoPC, to: Sequence[int], now: float, acts: Actions) -> None:
        assert t.commit is not None
        t.resend_at = now + self.resend_s
        for p in to:
            acts.decisions.append((p, Decision(t.txn_id, t.epoch, t.commit)))

    def _ack(self, rep: EngineReply, acts: Actions) -> None:
        t = self.active.get(rep.txn_id)
        if t is None or t.commit is None:
            return
        t.acks.add(rep.partition)
        if t.acks >= set(t.participants):
            del self.active[t.txn_id]
            self._remember(t.txn_id, t.commit)
            acts.log.append(CoordinatorLog("end", self.epoch, t.txn_id, t.participants, t.commit))

    def _results(self, t: _TwoPC) -> str:
        """Each fragment's result in request order, from the votes of its partitions."""
        per = {p: iter(json.loads(v.results)) for p, v in t.votes.items()}
        return json.dumps([next(per[p], None) for p in t.placement])

    # -- SERIALIZE -----------------------------------------------------------------------

    def _serialize(self, rep: EngineReply, now: float, acts: Actions) -> None:
        """A promised transaction, run and held by its partition (`engine.promises`): its
        place in the serial order is now, and its final status follows from the totals as
        they stand. A commit adds its deltas; the decision goes to the partition (and
        again until acknowledged, like a 2PC decision), the status to the client and to
        the statuses topic. A BASE transaction's reply is its final status already (it
        committed on its partition, with no deltas): only published."""
        if rep.txn_id in self.active or rep.txn_id in self.outcomes:
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
            t = _TwoPC(rep.txn_id, rep.epoch, rep.request_id, rep.reply_to, [rep.partition],
                       [rep.partition], now, commit=commit)  # fmt: skip
            self.active[t.txn_id] = t
            logged = CoordinatorLog("serialized", self.epoch, t.txn_id, t.participants, commit,
                                    reason, t.request_id, t.reply_to, rep.rows)  # fmt: skip
            acts.log.append(logged)
            self._send_decision(t, t.participants, now, acts)
        status = "committed" if commit else "aborted"
        self._count(f"{rep.kind}_{status}" if commit else f"{rep.kind}_aborted_{reason}")
        result = TxnResult(rep.request_id, rep.txn_id, status, reason, detail,
                           rep.results if commit else "[]", partitions=[rep.partition])  # fmt: skip
        acts.statuses.append(result)
        if self.topics.reply_problem(rep.reply_to) is None:  # a client chose it: checked
            acts.results.append((rep.reply_to, result))

    # -- reads ---------------------------------------------------------------------------

    def _read(
        self, req: TxnRequest, txn_id: str, now: float, deadline: float, acts: Actions
    ) -> None:
        q = req.query
        assert q is not None
        if q.key is not None:
            parts = [partition_of(key_of(q.key), self.partitions)]
        else:
            parts = list(range(self.partitions))
        r = _Read(req.request_id, req.reply_to, parts, deadline, q, resend_at=now + self.resend_s,
                  newest=q.isolation == "serializable")  # fmt: skip
        self.reads[txn_id] = r
        self._ask(txn_id, r, parts, acts)

    def _ask(self, txn_id: str, r: _Read, parts: Iterable[int], acts: Actions) -> None:
        q = r.query if r.cut is None else replace(r.query, at=r.cut)
        for p in parts:
            acts.requests.append(
                (p, EngineRequest(txn_id, self.epoch, "read", r.request_id, r.reply_to, [], q))
            )

    def _rows(self, rep: EngineReply, acts: Actions) -> None:
        r = self.reads.get(rep.txn_id)
        if r is None:
            return
        if not rep.ok and rep.reason == "too_old" and rep.at != r.cut:
            return  # a refusal of a cut the read has moved on from (its request sent again)
        if not rep.ok and rep.reason == "too_old" and r.retries < MAX_CUT_RETRIES:
            # that engine keeps no before-images back to the cut (it restarted, or began
            # keeping them for this query): its rows as of now, and a cut no older
            r.retries += 1
            r.newest, r.cut = True, None
            r.rows.pop(rep.partition, None)
            self._ask(rep.txn_id, r, [rep.partition], acts)
            return
        if not rep.ok:
            del self.reads[rep.txn_id]
            self._count("read_failed")
            acts.results.append(
                (r.reply_to, TxnResult(r.request_id, rep.txn_id, "failed", rep.reason, rep.detail))
            )
            return
        r.rows[rep.partition] = json.loads(rep.rows)
        r.at[rep.partition] = rep.at
        if len(r.rows) < len(r.partitions) or self._behind(rep.txn_id, r, acts):
            return
        del self.reads[rep.txn_id]
        rows = sorted((row for part in r.rows.values() for row in part), key=_row_key)
        aggs = aggregates_of(r.query.aggregates)
        if aggs:
            rows = [[["*"], combine([row for _, row in rows], aggs)]]
        body = json.dumps(rows)
        if len(body) > MAX_RESULT_BYTES:
            self._count("read_failed")
            detail = f"{len(rows)} rows are more than one result holds; narrow the query"
            acts.results.append(
                (r.reply_to, TxnResult(r.request_id, rep.txn_id, "failed", "too_many_rows", detail))
            )
            return
        self._count("reads")
        cut = max((a for a in r.at.values() if a is not None), default=None)
        acts.results.append(
            (
                r.reply_to,
                TxnResult(
                    r.request_id,
                    rep.txn_id,
                    "committed",
                    rows=body,
                    partitions=r.partitions,
                    at=cut if r.query.isolation != "read_committed" else None,
                ),
            )
        )

    def _behind(self, txn_id: str, r: _Read, acts: Actions) -> bool:
        """A cut read whose engines answered as of different batches of the spanning
        stream. The cut is the oldest of them for snapshot (the engines ahead go back to
        it: nothing waits, but a batch some engine had run may be missed), the newest for
        serializable (the engines behind answer once they have run it: every batch run
        anywhere when the query came is in). The engines not at the cut are asked again,
        as of it. True while it waits for them."""
        if r.query.isolation == "read_committed":
            return False
        points = [a for a in r.at.values() if a is not None]
        if not points:
            return False  # no spanning stream: nothing to cut
        cut = max(points) if r.newest else min(points)
        again = [p for p, a in r.at.items() if a is not None and a != cut]
        if not again:
            return False
        r.cut = cut
        for p in again:
            del r.rows[p], r.at[p]
        self._ask(txn_id, r, again, acts)
        return True

    # -- helpers -------------------------------------------------------------------------

    def _invalid(self, req: TxnRequest) -> str | None:
        if req.timeout_ms <= 0:
            return f"timeout_ms must be positive, not {req.timeout_ms}"
        if req.query is not None:
            if req.fragments:
                return "a request is a query or a transaction, not both"
            if self.tables and req.query.table not in self.tables:
                return f"no table {req.query.table!r}; tables are {sorted(self.tables)}"
            if req.query.isolation not in ISOLATIONS:
                given = req.query.isolation
                return f"isolation must be one of {', '.join(ISOLATIONS)}, not {given!r}"
            try:
                aggregates_of(req.query.aggregates)
            except ValueError as e:
                return str(e)
            return _bad_key(req.query.key) if req.query.key is not None else None
        if not req.fragments:
            return "a transaction needs at least one fragment"
        for f in req.fragments:
            tx = self.transactions.get(f.procedure)
            if tx is None:
                return f"no transaction {f.procedure!r}; registered: {sorted(self.transactions)}"
            bad = _bad_key(f.key) or _bad_params(f.params, tx)
            if bad is not None:
                return f"fragment {f.procedure}: {bad}"
        return None

    def _next_txn(self) -> str:
        self._seq += 1
        return f"{self.epoch}.{self._seq}"

    def _remember(self, txn_id: str, commit: bool) -> None:
        self.outcomes[txn_id] = commit
        if len(self.outcomes) > _KEPT_OUTCOMES:
            self.outcomes.popitem(last=False)

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self._on_count(what)


def _bad_key(text: str) -> str | None:
    try:
        key_of(text)
    except ValueError as e:
        return str(e)
    return None


def _bad_params(text: str, tx: Transaction) -> str | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return f"params are not JSON: {e}"
    return tx.problem(value)


def _row_key(row: list[Any]) -> tuple[tuple[int, int | str], ...]:
    """Key order with ints before strings, so mixed keys still sort."""
    return tuple((0, k) if isinstance(k, int) else (1, str(k)) for k in row[0])
