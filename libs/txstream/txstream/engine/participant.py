"""OLTP transactions inside one partition engine, serial with its TEs.

A single-partition transaction (`run`) executes its fragments in one write set and
commits into the group like a TE. A 2PC participant (`prepare`) executes its fragments,
holds the write set, stores it durably (the `__prepared__` table goes through the
changelog with the group) and votes. Until the decision arrives, the rows it wrote are
locked: an OLTP transaction or query touching one stops with `Conflict` and the task
defers it, with everything after it, so inputs still run in arrival order. Read locks end
at the vote, as strict 2PL allows once a transaction reads no more. Dataflow TEs are not
checked row by row; the task defers them while anything is prepared.
A decision applies or drops a held write set only if it names that transaction exactly,
which makes decisions idempotent and keeps a delayed one off later transactions, and only
at the epoch of its prepare: one at another epoch is dead-lettered (`wrong_epoch`) and the
write set stays held until the right one comes. That a decision came from the coordinator's
producer cannot be checked here (Kafka gives a record no producer identity to verify, short
of topic ACLs); the epoch, the message type on the wire and the coordinator's refusal to
write a client's result anywhere but the client reply topic are what keep a record that is
not the coordinator's decision from deciding.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from txstream.engine import held_writes
from txstream.engine.direct import DirectAnswers
from txstream.engine.executor import TeExecutor
from txstream.engine.fragments import Conflict, Failed, FragmentRunner
from txstream.engine.group import AbortRecord
from txstream.engine.history import TooOld
from txstream.engine.ledger import BatchLedger
from txstream.engine.promises import Promises, is_promise_id
from txstream.engine.rows import shared
from txstream.engine.writeset import TOMBSTONE, WriteSet, read, scan
from txstream.model.declarations import Key
from txstream.model.errors import TxnAbort
from txstream.oltp.messages import (
    CLIENT_REQUEST_KINDS,
    Decision,
    EngineReply,
    EngineRequest,
    TxnResult,
    key_of,
)
from txstream.oltp.predicates import aggregate, aggregates_of, conditions_of, matches

__all__ = ["EPOCH_KEY", "PREPARED_TABLE", "Conflict", "Participant", "Prepared"]

PREPARED_TABLE = "__prepared__"
EPOCH_KEY = ("coordinator", "epoch", 0)
_REMEMBERED_ABORTS = 10_000
# A reply travels in one Kafka record (1 MiB by default), merged with the other partitions'.
MAX_ROWS_BYTES = 256 * 1024
# Serializable reads waiting here for a batch to run; past that, the oldest is refused.
MAX_PARKED = 1_000
# Reasons a transaction was refused without running, not aborted: its status is "failed",
# as the coordinator reports the same refusals.
_REFUSED = frozenset({"unknown_procedure", "bad_request"})


@dataclass
class Prepared:
    txn_id: str
    epoch: int
    ws: WriteSet
    request_id: str
    reply_to: str
    results: str
    voted_at: float = 0.0


class Participant:
    def __init__(
        self,
        ledger: BatchLedger,
        executor: TeExecutor,
        read_out: Callable[[WriteSet], bool] = lambda ws: False,
    ) -> None:
        """`read_out(ws)`: whether a queued spanning batch has read (or will read) a row
        `ws` writes; a committed promise waits to land on such a row until the batch ran."""
        self.ledger = ledger
        self.executor = executor
        self._read_out = read_out
        self.fragments = FragmentRunner(executor, ledger, self.guard)
        self.direct = DirectAnswers(ledger)
        self.prepared: dict[str, Prepared] = {}
        self.locks: dict[str, dict[Key, str]] = {}  # table -> key -> holding txn
        # Aborts that arrived before their (deferred) prepare: that prepare must vote no.
        self._aborted: deque[str] = deque(maxlen=_REMEMBERED_ABORTS)
        # Serializable reads of a batch not run here yet, answered once it has run.
        self.parked: deque[EngineRequest] = deque()
        self.promises = Promises(ledger.base, lambda: ledger.group)

    @property
    def blocked(self) -> bool:
        return bool(self.prepared)

    def load(self) -> None:
        """After a restart: the transactions prepared or promised before the crash are
        still held."""
        self.promises.load()
        for (txn_id,), row in self.ledger.base.scan(PREPARED_TABLE, ()):
            ws, _ = held_writes.decode(row["writes"])
            self._hold(
                Prepared(
                    str(txn_id),
                    row["epoch"],
                    ws,
                    row["request_id"],
                    row["reply_to"],
                    row["results"],
                )
            )

    def request(self, req: EngineRequest) -> bool:
        """Handle one request; False if it conflicts with a prepared transaction, in which
        case nothing of it was applied and it must be retried after a decision."""
        seen = self.ledger.sys_value(EPOCH_KEY) or 0
        stale = req.epoch < seen
        if (req.kind in CLIENT_REQUEST_KINDS) != is_promise_id(req.txn_id):
            raise ValueError(
                f"a {req.kind!r} request named {req.txn_id!r}: promised transactions, and they "
                "alone, are named by their place in the promises topic (`promise_id`)"
            )
        try:
            if req.kind == "read":
                self._read(req)
            elif req.kind == "run":
                self._run(req, stale)
            elif req.kind == "prepare":
                self._prepare(req, stale)
            elif req.kind == "promise":
                self._promise(req)
            elif req.kind == "base":  # a client's, acknowledged before it ran: no epoch
                self._run(req, False, "base")
            elif req.kind == "direct":  # a client's, answered by this engine: no epoch
                self._direct(req)
            else:
                raise ValueError(f"unknown engine request kind {req.kind!r}")
        except Conflict:
            return False
        if req.epoch > seen:
            self.ledger.set_sys(EPOCH_KEY, req.epoch)
        self.ledger.executed()
        return True

    def decide(self, d: Decision) -> None:
        self.ledger.group.flags.told = True
        if is_promise_id(d.txn_id):  # a promise's decision never touches a 2PC one's
            detail = self.promises.decide(d, self.executor.merge, self._locked)
            self._reply(d.txn_id, "ack", True, detail=detail)
            return
        held = self.prepared.get(d.txn_id)
        group = self.ledger.group
        if held is None:
            if not d.commit:
                self._aborted.append(d.txn_id)
            self._reply(d.txn_id, "ack", True, detail="not prepared here")
            return
        if d.epoch != held.epoch:
            detail = f"decision on {d.txn_id} at epoch {d.epoch}; it was prepared at {held.epoch}"
            group.aborts.append(AbortRecord("<decision>", "decisions", -1, "wrong_epoch", detail))
            return
        if d.commit:
            self.executor.merge(held.ws)
        group.ws.put(PREPARED_TABLE, (held.txn_id,), TOMBSTONE)
        self._release(held)
        self._reply(held.txn_id, "ack", True, detail="committed" if d.commit else "aborted")

    def reinquire(self, every_s: float) -> bool:
        """A participant still waiting asks again by re-sending its votes (the coordinator
        answers a vote for a decided transaction with the decision)."""
        now = time.monotonic()
        due = [h for h in self.prepared.values() if now - h.voted_at >= every_s]
        for held in due:
            self._vote(held)
        return bool(due)

    def guard(self, table: str, key: Key | None) -> None:
        """Stop a transaction about to touch a row that a prepared one holds."""
        held = self.locks.get(table)
        if held and (key is None or key in held):
            raise Conflict(table, key)

    def _hold(self, held: Prepared) -> None:
        self.prepared[held.txn_id] = held
        for table, rows in held.ws.tables.items():
            locks = self.locks.setdefault(table, {})
            for key in rows:
                locks[key] = held.txn_id

    def _release(self, held: Prepared) -> None:
        del self.prepared[held.txn_id]
        for table, rows in held.ws.tables.items():
            locks = self.locks[table]
            for key in rows:
                if locks.get(key) == held.txn_id:
                    del locks[key]
            if not locks:
                del self.locks[table]
        self.land()

    def land(self) -> bool:
        """Land the committed promises nothing holds any more; True if one landed."""
        if not self.promises.landing:
            return False
        return self.promises.land(self.executor.merge, self._locked)

    def _locked(self, ws: WriteSet) -> bool:
        """Whether a row `ws` writes is held: locked by a prepared transaction, or read by
        a queued spanning batch (whose participants all run it on the row they were sent)."""
        for table, rows in ws.tables.items():
            held = self.locks.get(table)
            if held and any(key in held for key in rows):
                return True
        return self._read_out(ws)

    def _attempt(self, req: EngineRequest, stale: bool) -> tuple[WriteSet, str] | Failed:
        if stale:
            return Failed("fenced", "stale coordinator epoch")
        if req.kind == "prepare" and req.txn_id in self._aborted:
            return Failed("aborted", "the coordinator aborted it before it was prepared")
        return self.fragments.execute(req.fragments)

    def _run(self, req: EngineRequest, stale: bool, reply: str = "result") -> None:
        """A single-partition transaction, committed with the group; also a BASE one
        (`reply` "base"), which no SERIALIZE follows, so it may not change a field under
        an aggregation constraint (`TeTable._bounded`)."""
        outcome = self._attempt(req, stale)
        if isinstance(outcome, Failed):
            self.ledger.oltp_aborted(outcome.procedure, outcome.reason)
            self._reply(req.txn_id, reply, False, outcome.reason, outcome.detail, req=req)
            return
        ws, results = outcome
        self.executor.merge(ws)
        self._reply(req.txn_id, reply, True, results=results, req=req)

    def _direct(self, req: EngineRequest) -> None:
        """A single-partition ACID transaction straight from its client, answered to the
        client with the group; a resend of one that ran gets the first answer, and runs
        no second time (`engine.direct`)."""
        kept = self.direct.find(req.request_id)
        if kept is not None:
            self.ledger.result(req.reply_to, kept)
            return
        outcome = self.fragments.execute(req.fragments)
        here = [self.ledger.partition]
        if isinstance(outcome, Failed):
            self.ledger.oltp_aborted(outcome.procedure, outcome.reason)
            status = "failed" if outcome.reason in _REFUSED else "aborted"
            result = TxnResult(req.request_id, req.txn_id, status, outcome.reason,
                               outcome.detail, partitions=here)  # fmt: skip
        else:
            ws, results = outcome
            self.executor.merge(ws)
            result = TxnResult(req.request_id, req.txn_id, "committed", results=results,
                               partitions=here)  # fmt: skip
        self.direct.keep(result)
        self.ledger.result(req.reply_to, result)

    def _prepare(self, req: EngineRequest, stale: bool) -> None:
        outcome = self._attempt(req, stale)
        if isinstance(outcome, Failed):
            self.ledger.oltp_aborted(outcome.procedure, outcome.reason)
            self._reply(req.txn_id, "vote", False, outcome.reason, outcome.detail, req=req)
            return
        ws, results = outcome
        ws.detach()  # held on its own: the group it read through is committed meanwhile
        held = Prepared(req.txn_id, req.epoch, ws, req.request_id, req.reply_to, results)
        self.ledger.group.ws.put(
            PREPARED_TABLE,
            (req.txn_id,),
            {
                "epoch": req.epoch,
                "writes": held_writes.encode(ws),
                "request_id": req.request_id,
                "reply_to": req.reply_to,
                "results": results,
            },
        )
        self._hold(held)
        self._vote(held)

    def _promise(self, req: EngineRequest) -> None:
        """Run a promised transaction and hold it for SERIALIZE (`engine.promises`); a
        failure here is its final status. Promises come from clients, not the
        coordinator, so they carry no coordinator epoch to fence."""
        outcome = self.fragments.execute(req.fragments, basic=True)
        if not isinstance(outcome, Failed):
            ws, results = outcome
            try:
                deltas = self.promises.hold(req.txn_id, ws, self.executor.dataflow.decl.tables)
            except TxnAbort as e:
                outcome = Failed(e.reason, str(e))
        if isinstance(outcome, Failed):
            self.ledger.oltp_aborted(outcome.procedure, outcome.reason)
            self._reply(req.txn_id, "promise", False, outcome.reason, outcome.detail, req=req)
            return
        # SERIALIZE waits for it
        self._reply(req.txn_id, "promise", True, results=results, rows=json.dumps(deltas),
                    req=req, urgent=True)  # fmt: skip

    def _vote(self, held: Prepared) -> None:
        held.voted_at = time.monotonic()
        self._reply(
            held.txn_id,
            "vote",
            True,
            results=held.results,
            request_id=held.request_id,
            reply_to=held.reply_to,
            epoch=held.epoch,
            urgent=True,
        )

    def _read(self, req: EngineRequest) -> None:
        q = req.query
        decl = self.executor.dataflow.decl
        if q is None or q.table not in decl.tables:
            name = None if q is None else q.table
            self._reply(
                req.txn_id,
                "rows",
                False,
                "unknown_table",
                f"no table {name!r}; tables are {sorted(decl.tables)}",
                req=req,
            )
            return
        # Snapshot and serializable wait for prepared transactions on the rows they read;
        # read_committed does not, and sees their before-images.
        if q.isolation != "read_committed":
            try:
                key = None if q.key is None else key_of(q.key)
            except ValueError as e:
                self._reply(req.txn_id, "rows", False, "bad_query", str(e), req=req)
                return
            self.guard(q.table, key)
        history = self.executor.history
        if history is not None and q.at is not None and q.at > history.point:
            self._park(req)  # answered once this engine has run batch `at`
            return
        self._answer(req)

    def serve(self, point: int) -> None:
        """The engine has run batch `point` of its spanning stream: answer the reads
        waiting for it, as of it (only a serializable cut asks for a batch not run)."""
        if not self.parked:
            return
        waiting: deque[EngineRequest] = deque()
        ready: list[EngineRequest] = []
        for r in self.parked:
            assert r.query is not None and r.query.at is not None
            (ready if r.query.at <= point else waiting).append(r)
        self.parked = waiting
        for req in ready:
            self._answer(req)

    def _park(self, req: EngineRequest) -> None:
        self.parked.append(req)
        if len(self.parked) > MAX_PARKED:
            old = self.parked.popleft()
            detail = f"more than {MAX_PARKED} serializable reads wait for batches here"
            self._reply(old.txn_id, "rows", False, "busy", detail, req=old)

    def _answer(self, req: EngineRequest) -> None:
        """The rows a read asks for, replied with this group: the engine's current state,
        or for a cut (snapshot, serializable), its state right after batch `at` of the
        spanning stream, or its newest batch, which it names (the reply commits with this
        group, so it reports nothing a crash could undo)."""
        q = req.query
        assert q is not None
        ws, base = self.ledger.group.ws, self.ledger.base
        history = self.executor.history if q.isolation != "read_committed" else None
        try:
            key = None if q.key is None else key_of(q.key)
            if key is not None:
                row = read(ws, base, q.table, key)
                found = {} if row is None else {key: row}
            else:
                found = dict(scan(ws, base, q.table, (), copy=shared))  # only read
            at = None
            if history is not None:
                history.asked()
                at = history.point if q.at is None else q.at
                found = history.rows_at(at, q.table, found, key)
            conds = conditions_of(q.where)
            matched = [(k, r) for k, r in sorted(found.items()) if matches(r, conds)]
            aggs = aggregates_of(q.aggregates)
            if aggs:
                body = json.dumps([[["*"], aggregate([r for _, r in matched], aggs)]])
            else:
                body = json.dumps([[list(k), r] for k, r in matched])
        except TooOld as e:
            self._reply(req.txn_id, "rows", False, "too_old", str(e), req=req, at=q.at)
            return
        except ValueError as e:
            self._reply(req.txn_id, "rows", False, "bad_query", str(e), req=req)
            return
        if len(body) > MAX_ROWS_BYTES:
            detail = (
                f"{len(matched)} rows are more than one reply holds; "
                "narrow them with a key or conditions, or ask for aggregates"
            )
            self._reply(req.txn_id, "rows", False, "too_many_rows", detail, req=req)
            return
        self._reply(req.txn_id, "rows", True, rows=body, req=req, at=at)

    def _reply(
        self,
        txn_id: str,
        kind: str,
        ok: bool,
        reason: str = "",
        detail: str = "",
        *,
        results: str = "[]",
        rows: str = "[]",
        req: EngineRequest | None = None,
        request_id: str = "",
        reply_to: str = "",
        epoch: int = 0,
        at: int | None = None,
        urgent: bool = False,
    ) -> None:
        """Reply with the group; `urgent`: the coordinator waits on it (a vote, a promise),
        so the group commits at the end of the run."""
        if req is not None:
            request_id, reply_to, epoch = req.request_id, req.reply_to, req.epoch
        self.ledger.reply(
            EngineReply(
                txn_id,
                self.ledger.partition,
                kind,
                ok,
                reason,
                detail,
                results,
                rows,
                request_id,
                reply_to,
                epoch,
                at,
            ),
            urgent,
        )
