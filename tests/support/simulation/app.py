"""The simulated dataflow, and the same computation done serially in plain Python.

Two border streams write one table, so the order in which their batches interleave shows in
the result: a -> pa -> a2 -> pa2, and b -> pb -> b2. `pa` owns a window (ROWS 3 SLIDE 2)
and aborts on some tuples; `pa2` raises on others; with `nested`, pa and pa2 are one nested
transaction. Rows use the chain app's Avro schemas, so the real codecs carry them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from txstream import App, Record, TxnContext

ROWS, SLIDE = 3, 2


def build_app(nested: bool) -> App:
    app = App("sim")
    for name in ("a", "a2", "b", "b2"):
        app.stream(name, schema="chain.Item", key_field="key")
    app.table("totals", schema="chain.Total")
    app.table("last", schema="chain.Item")
    app.window("w", schema="chain.Item", rows=ROWS, slide=SLIDE)

    @app.procedure(input="a", outputs=["a2"], windows=["w"])
    def pa(ctx: TxnContext, batch: Sequence[Record]) -> None:
        totals, w = ctx.table("totals"), ctx.window("w")
        for t in batch:
            key = (t["key"] % 3,)
            row = totals.get(key) or {"value": 0, "batches": 0}
            totals.put(key, {"value": row["value"] + t["value"], "batches": row["batches"] + 1})
            w.insert(t)
            if t["value"] % 11 == 10:
                ctx.abort("sim", f"value {t['value']}")
            seen = sum(v["value"] for v in w.visible())
            ctx.emit("a2", {"key": t["key"], "value": t["value"] + seen})

    @app.procedure(input="a2")
    def pa2(ctx: TxnContext, batch: Sequence[Record]) -> None:
        last = ctx.table("last")
        for t in batch:
            if t["value"] % 13 == 12:
                raise RuntimeError(f"value {t['value']}")
            last.put(t["key"] % 4, {"key": t["key"], "value": t["value"]})

    @app.procedure(input="b", outputs=["b2"])
    def pb(ctx: TxnContext, batch: Sequence[Record]) -> None:
        totals = ctx.table("totals")
        for t in batch:
            key = (t["key"] % 3,)
            if t["value"] % 5 == 0:
                totals.delete(key)
                continue
            row = totals.get(key) or {"value": 0, "batches": 0}
            total = row["value"] * 2 + t["value"]
            totals.put(key, {"value": total, "batches": row["batches"] + 1})
            ctx.emit("b2", {"key": t["key"], "value": total})

    if nested:
        app.nested("pair", ["pa", "pa2"])
    return app


class _Abort(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _State:
    totals: dict[int, dict[str, int]] = field(default_factory=dict)
    last: dict[int, dict[str, int]] = field(default_factory=dict)
    staged: list[dict[str, int]] = field(default_factory=list)
    visible: list[dict[str, int]] = field(default_factory=list)


@dataclass
class Reference:
    """The dataflow run serially: batches in the order given, aborted TEs leaving nothing."""

    nested: bool
    state: _State = field(default_factory=_State)
    outputs: dict[str, list[tuple[int, list[dict[str, int]]]]] = field(
        default_factory=lambda: {"a2": [], "b2": []}
    )
    aborts: list[tuple[str, str, int, str]] = field(default_factory=list)
    last_ids: dict[str, tuple[int, int]] = field(default_factory=dict)  # id, digest

    def process(
        self, stream: str, batch_id: int, tuples: list[dict[str, int]], digest: int
    ) -> None:
        """An exact re-send of the last batch is skipped; another id not above it is a dead
        letter; a new batch runs its stream's procedures."""
        last = self.last_ids.get(stream)
        if last is not None and batch_id <= last[0]:
            if (batch_id, digest) != last:
                self.aborts.append(("<input>", stream, batch_id, "stale_batch_id"))
            return
        self.last_ids[stream] = (batch_id, digest)
        if stream == "a":
            self._a(batch_id, tuples)
        else:
            self._b(batch_id, tuples)

    def _a(self, batch_id: int, tuples: list[dict[str, int]]) -> None:
        pa, pa2, stream2 = ("pair/pa", "pair/pa2", "a") if self.nested else ("pa", "pa2", "a2")
        work = copy.deepcopy(self.state)
        try:
            a2 = _pa(work, tuples)
        except _Abort as e:
            self.aborts.append((pa, "a", batch_id, e.reason))
            return
        if not self.nested:
            self.state = copy.deepcopy(work)
            self.outputs["a2"].append((batch_id, a2))
        try:
            _pa2(work, a2)
        except _Abort as e:
            self.aborts.append((pa2, stream2, batch_id, e.reason))
            return
        if self.nested:
            self.outputs["a2"].append((batch_id, a2))
        self.state = work

    def _b(self, batch_id: int, tuples: list[dict[str, int]]) -> None:
        out = []
        for t in tuples:
            key = t["key"] % 3
            if t["value"] % 5 == 0:
                self.state.totals.pop(key, None)
                continue
            row = self.state.totals.get(key, {"value": 0, "batches": 0})
            total = row["value"] * 2 + t["value"]
            self.state.totals[key] = {"value": total, "batches": row["batches"] + 1}
            out.append({"key": t["key"], "value": total})
        self.outputs["b2"].append((batch_id, out))

    def tables(self) -> dict[str, dict[tuple[int], dict[str, Any]]]:
        return {
            "totals": {(k,): v for k, v in self.state.totals.items()},
            "last": {(k,): v for k, v in self.state.last.items()},
        }


def _pa(s: _State, tuples: list[dict[str, int]]) -> list[dict[str, int]]:
    out = []
    for t in tuples:
        row = s.totals.get(t["key"] % 3, {"value": 0, "batches": 0})
        s.totals[t["key"] % 3] = {"value": row["value"] + t["value"], "batches": row["batches"] + 1}
        s.staged.append(dict(t))
        if len(s.staged) == SLIDE:
            s.visible, s.staged = (s.visible + s.staged)[-ROWS:], []
        if t["value"] % 11 == 10:
            raise _Abort("sim")
        out.append({"key": t["key"], "value": t["value"] + sum(v["value"] for v in s.visible)})
    return out


def _pa2(s: _State, tuples: list[dict[str, int]]) -> None:
    for t in tuples:
        if t["value"] % 13 == 12:
            raise _Abort("exception")
        s.last[t["key"] % 4] = {"key": t["key"], "value": t["value"]}
