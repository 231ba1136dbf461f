"""The partition engine against a serial reference, on random procedure behaviour.

A fixed dataflow: in -> p1 -> mid -> p2 -> out, a table `t` whose insert trigger counts the
puts into `audit`, and a window `w` (ROWS n SLIDE s, drawn) owned by p1; p1 and p2 form a
nested transaction in half the examples. Hypothesis draws each batch's program for p1 and
p2 (reads, writes, read-modify-writes, deletes, scans, window inserts and reads, emits,
changing a row after it was read or put, and a user abort or an exception at any point),
batch ids with re-sends among them (exact re-sends of the last batch, and stale ids: lower,
or the last id with other content), and where groups commit: synchronously, or pipelined
(taken in flight while the next group reads through it, and applied later).

The reference runs the same programs serially over plain dicts, each new batch in id order:
a committed TE's effects are applied, an aborted one's are dropped entirely (with nesting,
its partner's too); an exact re-send leaves no trace, and a stale id only a dead letter.
The engine's committed tables, window, outputs and aborts must equal the reference's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.support.fakes import MemoryBase
from txstream import TxnContext
from txstream.engine.group import SYS_TABLE, CommitGroup, Outcome, last_batch_key
from txstream.engine.partition_engine import PartitionEngine
from txstream.model.app import App
from txstream.model.declarations import Record

Op = tuple[str, int, int]  # (kind, key, value); unused parts are 0
TABLE_OPS = ("get", "put", "incr", "append", "put_then_mutate", "delete", "scan", "emit")
WINDOW_OPS = ("win_insert", "win_read", "win_mutate")
COMMITS = ("none", "none", "sync", "flight", "finish")


def ops(kinds: Sequence[str]) -> st.SearchStrategy[list[Op]]:
    """A TE's program: a few operations, then maybe a user abort or an exception among them."""
    op = st.tuples(st.sampled_from(kinds), st.integers(0, 3), st.integers(-3, 9))

    @st.composite
    def program(draw: st.DrawFn) -> list[Op]:
        body = draw(st.lists(op, max_size=6))
        fail = draw(st.sampled_from([None, None, None, "abort", "raise"]))
        if fail is not None:
            body.insert(draw(st.integers(0, len(body))), (fail, 0, 0))
        return body

    return program()


@dataclass(frozen=True)
class Scenario:
    nested: bool
    rows: int
    slide: int
    deliveries: list[tuple[int, int]]  # (batch id, digest of its content), in order
    programs: dict[int, tuple[list[Op], list[Op]]]  # batch id -> (p1's ops, p2's ops)
    commits: list[str]  # after each delivery: none, sync, flight or finish

    @property
    def digests(self) -> dict[int, int]:
        """Each new batch's digest: the first delivery of its id, since ids only grow."""
        out: dict[int, int] = {}
        for batch_id, digest in self.deliveries:
            out.setdefault(batch_id, digest)
        return out


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    rows = draw(st.integers(1, 4))
    slide = draw(st.integers(1, rows))
    deliveries: list[tuple[int, int]] = []
    programs: dict[int, tuple[list[Op], list[Op]]] = {}
    last = 0
    for _ in range(draw(st.integers(1, 10))):
        resend = draw(st.sampled_from([None, None, None, "exact", "stale"])) if last else None
        if resend == "exact":
            deliveries.append((last, last))
        elif resend == "stale":  # a lower id, or the last id with other content
            deliveries.append((draw(st.integers(1, last)), -draw(st.integers(1, 3))))
        else:
            last += draw(st.integers(1, 3))
            deliveries.append((last, last))  # a new batch's digest is its id
            programs[last] = (draw(ops(TABLE_OPS + WINDOW_OPS)), draw(ops(TABLE_OPS)))
    n = len(deliveries)
    commits = draw(st.lists(st.sampled_from(COMMITS), min_size=n, max_size=n))
    return Scenario(draw(st.booleans()), rows, slide, deliveries, programs, commits)


# --- the engine side -------------------------------------------------------------------


def run_ops(ctx: TxnContext, program: list[Op], out: str) -> None:
    t = ctx.table("t")
    for kind, k, v in program:
        if kind == "get":
            ctx.emit(out, {"get": k, "row": t.get(k)})
        elif kind == "put":
            t.put(k, {"n": v, "hist": [v]})
        elif kind == "incr":
            row = t.get(k) or {"n": 0, "hist": []}
            t.put(k, {"n": row["n"] + v, "hist": row["hist"]})
        elif kind == "append":  # change the row read in place, then write it back
            found = t.get(k)
            if found is not None:
                found["n"] += v
                found["hist"].append(v)
                t.put(k, found)
        elif kind == "put_then_mutate":  # a row changed after `put` must not change the table
            row = {"n": v, "hist": [v]}
            t.put(k, row)
            row["n"] = -1
            row["hist"].append(-1)
        elif kind == "delete":
            t.delete(k)
        elif kind == "scan":
            ctx.emit(out, {"scan": list(t.scan())})
        elif kind == "emit":
            ctx.emit(out, {"v": v})
        elif kind == "win_insert":
            ctx.window("w").insert({"v": v})
        elif kind == "win_read":
            w = ctx.window("w")
            ctx.emit(out, {"visible": w.visible(), "staged": w.staged()})
        elif kind == "win_mutate":  # a tuple read from the window is the procedure's own
            for tup in ctx.window("w").visible() + ctx.window("w").staged():
                tup["v"] = -99
        elif kind == "abort":
            ctx.abort("prop_abort", "drawn")
        elif kind == "raise":
            raise RuntimeError("drawn")


def build_app(s: Scenario) -> App:
    app = App("prop")
    for name in ("in", "mid", "out"):
        app.stream(name, schema="x.R")
    app.table("t", schema="x.R")
    app.table("audit", schema="x.R")
    app.window("w", schema="x.R", rows=s.rows, slide=s.slide)

    def procedure(which: int, out: str) -> Callable[[TxnContext, Sequence[Record]], None]:
        def run(ctx: TxnContext, batch: Sequence[Record]) -> None:
            run_ops(ctx, s.programs[ctx.batch_id][which], out)

        return run

    app.procedure(input="in", outputs=["mid"], windows=["w"], name="p1")(procedure(0, "mid"))
    app.procedure(input="mid", outputs=["out"], name="p2")(procedure(1, "out"))

    @app.on_insert("t")
    def count_put(ctx: TxnContext, row: Record) -> None:
        audit = ctx.table("audit")
        seen = audit.get("puts") or {"n": 0}
        audit.put("puts", {"n": seen["n"] + 1})

    if s.nested:
        app.nested("pair", ["p1", "p2"])
    return app


@dataclass
class EngineRun:
    base: MemoryBase
    groups: list[CommitGroup]


def run_engine(s: Scenario) -> EngineRun:
    app = build_app(s)
    base = MemoryBase()
    engine = PartitionEngine(app.dataflow(), base, 0, app.params)
    groups: list[CommitGroup] = []
    in_flight: CommitGroup | None = None
    last = 0

    def finish() -> None:
        nonlocal in_flight
        if in_flight is not None:
            base.apply(in_flight)
            engine.committed()
            groups.append(in_flight)
            in_flight = None

    for (batch_id, digest), commit in zip(s.deliveries, s.commits, strict=True):
        before = _group_shape(engine.group)
        outcome = engine.process("in", batch_id, [{"i": 0}], record=b"%d" % digest)
        if batch_id == last and digest == s.digests[last]:
            assert outcome is Outcome.DUPLICATE, f"exact re-send of batch {batch_id} ran again"
            assert _group_shape(engine.group) == before, f"re-sent batch {batch_id} left a trace"
        elif batch_id <= last:
            assert outcome is Outcome.STALE, f"stale batch {batch_id} (last {last}): {outcome}"
        else:
            assert outcome is Outcome.PROCESSED
            last = batch_id
        if commit in ("sync", "flight", "finish"):
            finish()
        if commit == "sync":
            groups.append(engine.take_group())
            base.apply(groups[-1])
        elif commit == "flight":
            in_flight = engine.take_group(in_flight=True)
    finish()
    groups.append(engine.take_group())
    base.apply(groups[-1])
    return EngineRun(base, groups)


def _group_shape(g: CommitGroup) -> tuple[Any, ...]:
    tables = {t: dict(rows) for t, rows in g.ws.tables.items()}
    return (
        tables,
        dict(g.ws.windows),
        len(g.outputs),
        len(g.aborts),
        g.stats.executions,
        g.stats.batches,
    )


# --- the serial reference --------------------------------------------------------------


class RefAbort(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class RefState:
    t: dict[int, dict[str, Any]] = field(default_factory=dict)
    puts: int = 0
    staged: list[dict[str, int]] = field(default_factory=list)
    visible: list[dict[str, int]] = field(default_factory=list)


def ref_ops(st_: RefState, program: list[Op], rows: int, slide: int) -> list[dict[str, Any]]:
    """Run a program on `st_` in place; its emitted tuples, or RefAbort."""
    emitted: list[dict[str, Any]] = []
    for kind, k, v in program:
        if kind == "get":
            emitted.append({"get": k, "row": copy.deepcopy(st_.t.get(k))})
        elif kind in ("put", "put_then_mutate"):
            st_.t[k] = {"n": v, "hist": [v]}
            st_.puts += 1
        elif kind == "incr":
            old = st_.t.get(k, {"n": 0, "hist": []})
            st_.t[k] = {"n": old["n"] + v, "hist": list(old["hist"])}
            st_.puts += 1
        elif kind == "append" and k in st_.t:
            old = st_.t[k]
            st_.t[k] = {"n": old["n"] + v, "hist": [*old["hist"], v]}
            st_.puts += 1
        elif kind == "delete":
            st_.t.pop(k, None)
        elif kind == "scan":
            emitted.append({"scan": [((key,), copy.deepcopy(st_.t[key])) for key in sorted(st_.t)]})
        elif kind == "emit":
            emitted.append({"v": v})
        elif kind == "win_insert":
            st_.staged.append({"v": v})
            if len(st_.staged) == slide:
                st_.visible = (st_.visible + st_.staged)[-rows:]
                st_.staged = []
        elif kind == "win_read":
            emitted.append(
                {"visible": copy.deepcopy(st_.visible), "staged": copy.deepcopy(st_.staged)}
            )
        elif kind == "abort":
            raise RefAbort("prop_abort")
        elif kind == "raise":
            raise RefAbort("exception")
    return emitted


@dataclass
class Reference:
    state: RefState
    outputs: list[tuple[str, int, list[dict[str, Any]]]]
    aborts: list[tuple[str, str, int, str]]
    last: int


def run_reference(s: Scenario) -> Reference:
    ref = Reference(RefState(), [], [], 0)
    for batch_id, digest in s.deliveries:
        if batch_id == ref.last and digest == s.digests[batch_id]:
            continue
        if batch_id <= ref.last:
            ref.aborts.append(("<input>", "in", batch_id, "stale_batch_id"))
            continue
        ref.last = batch_id
        ops1, ops2 = s.programs[batch_id]
        work = copy.deepcopy(ref.state)
        name1, name2, stream2 = ("pair/p1", "pair/p2", "in") if s.nested else ("p1", "p2", "mid")
        try:
            mid = ref_ops(work, ops1, s.rows, s.slide)
        except RefAbort as a:
            ref.aborts.append((name1, "in", batch_id, a.reason))
            continue
        if not s.nested:  # p1 commits alone
            ref.state = copy.deepcopy(work)
            ref.outputs.append(("mid", batch_id, mid))
        try:
            out = ref_ops(work, ops2, s.rows, s.slide)
        except RefAbort as a:
            ref.aborts.append((name2, stream2, batch_id, a.reason))
            continue
        if s.nested:
            ref.outputs.append(("mid", batch_id, mid))
        ref.state = work
        ref.outputs.append(("out", batch_id, out))
    return ref


# --- the property ----------------------------------------------------------------------


@given(scenarios())
def test_engine_matches_serial_reference(s: Scenario) -> None:
    run = run_engine(s)
    ref = run_reference(s)
    outputs = [(o.stream, o.batch_id, list(o.tuples)) for g in run.groups for o in g.outputs]
    assert outputs == ref.outputs
    aborts = [(a.procedure, a.stream, a.batch_id, a.reason) for g in run.groups for a in g.aborts]
    assert aborts == ref.aborts
    tables = run.base.tables
    assert tables.get("t", {}) == {(k,): row for k, row in ref.state.t.items()}
    puts = tables.get("audit", {}).get(("puts",))
    assert (puts or {"n": 0})["n"] == ref.state.puts
    window = run.base.windows.get("w")
    seen = ([], []) if window is None else (list(window.staged), list(window.visible))
    assert seen == (ref.state.staged, ref.state.visible)
    assert tables[SYS_TABLE][last_batch_key("in", 0)] == {"value": ref.last}
