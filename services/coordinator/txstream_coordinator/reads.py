"""Queries fanned out to the partitions holding their rows (a keyed query to its key's
partition, any other to all) and the answers combined into one result, aggregates
included. A snapshot or serializable read is one consistent cut across the engines: those
that answered as of another batch of the spanning stream are asked again, as of the cut
(`Reads._behind`); a read_committed one takes each engine's rows as they are."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from txstream.kafka.routing import partition_of
from txstream.oltp.messages import EngineReply, EngineRequest, Query, TxnRequest, TxnResult, key_of
from txstream.oltp.predicates import aggregates_of, combine
from txstream_coordinator.actions import Actions
from txstream_coordinator.context import Context

MAX_RESULT_BYTES = 900 * 1024  # a result is one Kafka record: 1 MiB by default
MAX_CUT_RETRIES = 3  # a cut read asks again an engine that could not go back to the cut


@dataclass
class Read:
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


class Reads:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.open: dict[str, Read] = {}  # asked and not yet answered

    def start(
        self, req: TxnRequest, txn_id: str, now: float, deadline: float, acts: Actions
    ) -> None:
        q = req.query
        assert q is not None
        if q.key is not None:
            parts = [partition_of(key_of(q.key), self.ctx.partitions)]
        else:
            parts = list(range(self.ctx.partitions))
        r = Read(req.request_id, req.reply_to, parts, deadline, q,
                 resend_at=now + self.ctx.resend_s,
                 newest=q.isolation == "serializable")  # fmt: skip
        self.open[txn_id] = r
        self._ask(txn_id, r, parts, acts)

    def rows(self, rep: EngineReply, acts: Actions) -> None:
        r = self.open.get(rep.txn_id)
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
            del self.open[rep.txn_id]
            self.ctx.count("read_failed")
            acts.results.append(
                (r.reply_to, TxnResult(r.request_id, rep.txn_id, "failed", rep.reason, rep.detail))
            )
            return
        r.rows[rep.partition] = json.loads(rep.rows)
        r.at[rep.partition] = rep.at
        if len(r.rows) < len(r.partitions) or self._behind(rep.txn_id, r, acts):
            return
        del self.open[rep.txn_id]
        rows = sorted((row for part in r.rows.values() for row in part), key=_row_key)
        aggs = aggregates_of(r.query.aggregates)
        if aggs:
            rows = [[["*"], combine([row for _, row in rows], aggs)]]
        body = json.dumps(rows)
        if len(body) > MAX_RESULT_BYTES:
            self.ctx.count("read_failed")
            detail = f"{len(rows)} rows are more than one result holds; narrow the query"
            acts.results.append(
                (r.reply_to, TxnResult(r.request_id, rep.txn_id, "failed", "too_many_rows", detail))
            )
            return
        self.ctx.count("reads")
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

    def tick(self, now: float, acts: Actions) -> None:
        """Cut reads not answered in `resend_s` are asked again; reads past their deadline
        fail."""
        for txn_id, r in list(self.open.items()):
            if now < r.deadline and now >= r.resend_at and r.query.isolation != "read_committed":
                # an engine that restarted lost the read it held for a batch: ask again
                r.resend_at = now + self.ctx.resend_s
                self._ask(txn_id, r, [p for p in r.partitions if p not in r.rows], acts)
            if now >= r.deadline:
                del self.open[txn_id]
                missing = [p for p in r.partitions if p not in r.rows]
                self.ctx.count("read_timeout")
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

    def _ask(self, txn_id: str, r: Read, parts: Iterable[int], acts: Actions) -> None:
        q = r.query if r.cut is None else replace(r.query, at=r.cut)
        for p in parts:
            acts.requests.append(
                (p, EngineRequest(txn_id, self.ctx.epoch, "read", r.request_id, r.reply_to, [], q))
            )

    def _behind(self, txn_id: str, r: Read, acts: Actions) -> bool:
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


def _row_key(row: list[Any]) -> tuple[tuple[int, int | str], ...]:
    """Key order with ints before strings, so mixed keys still sort."""
    return tuple((0, k) if isinstance(k, int) else (1, str(k)) for k in row[0])
