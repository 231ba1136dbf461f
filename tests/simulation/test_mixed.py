"""Every transaction mechanism on the same constrained rows, across partitions, with engines
and the coordinator crashing, against the model of what the clients saw commit and the
spanning transfers' serial reference at their level (`tests/support/simulation/mixed.py`); and the
defects put back that the simulation must find.

`make test` runs 1,000 seeds, `make faults` (TXSTREAM_FAULTS=long) 20,000;
TXSTREAM_SIM_SEED=<seed> runs exactly one.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable

import pytest

from tests.support.scale import scaled
from tests.support.simulation.mixed import Simulation, run_seed
from txstream.engine import held_writes, promises
from txstream.engine.participant import Participant
from txstream.engine.span_runner import SpanRunner
from txstream.engine.writeset import WriteSet
from txstream.model.declarations import Key, Record, Table

CHUNK = 100  # seeds per test case: a failing case names its first failing seed
HERE = "tests/simulation/test_mixed.py"


def seeds() -> list[int]:
    fixed = os.environ.get("TXSTREAM_SIM_SEED")
    if fixed:
        return [int(fixed)]
    return list(range(scaled(1_000, 20_000)))


def chunks() -> list[list[int]]:
    all_seeds = seeds()
    return [all_seeds[i : i + CHUNK] for i in range(0, len(all_seeds), CHUNK)]


def rerun(seed: int) -> str:
    return f"rerun it alone: TXSTREAM_SIM_SEED={seed} .venv/bin/pytest -q {HERE}"


@pytest.mark.parametrize("chunk", chunks(), ids=lambda c: f"seeds{c[0]}-{c[-1]}")
def test_mixed_mechanisms_equal_the_model(chunk: list[int]) -> None:
    """Promises (add, add then put), BASE, single-partition and 2PC ACID transactions,
    queries and spanning batches (at PL0-PL4) on the same rows, in random interleavings,
    with crashes: every transaction gets one final status and every spanning tuple one
    outcome, each row holds what the committed ones made of it, each item's sum is within
    its bound, the transfers equal their level's reference, and nothing stays prepared or
    promised."""
    for seed in chunk:
        problem = run_seed(seed)
        if problem is not None:
            pytest.fail(f"{problem}\n{rerun(seed)}", pytrace=False)


def test_the_runs_take_the_crash_paths() -> None:
    """Restarts find stores behind their changelog, prepared transactions and promises held
    or committed and waiting to land, spanning input to catch up, a coordinator with
    transactions in doubt; the log is truncated, records wait for decisions and spanning
    batches, and queries go ahead of them; every isolation level runs."""
    seen: Counter[str] = Counter()
    levels: set[str] = set()
    for seed in range(100):
        sim = Simulation(seed)
        sim.run()
        seen.update(sim.seen)
        levels.add(sim.spanning.isolation.value)
    paths = ("store behind", "prepared reloaded", "promise reloaded", "landing reloaded",
             "caught up", "coordinator in doubt", "log truncated", "deferred", "query ahead",
             "aborted coordinator_restart", "aborted aggregate_constraint")  # fmt: skip
    assert [p for p in paths if not seen[p]] == [], seen
    assert levels == {"PL0", "PL1", "PL2", "PL3", "PL4"}


# -- the defects, put back ----------------------------------------------------------------

TEETH = 200  # the first seeds a defect must be found in
Patch = Callable[[pytest.MonkeyPatch], None]
_DELTAS = promises.deltas
_DECODE = held_writes.decode


def caught(monkeypatch: pytest.MonkeyPatch, defect: Patch, sign: str) -> str | None:
    """The first failure, among the first seeds with `defect` put back, that shows `sign`
    (what the defect breaks) in a seed that passes without it; None if none does."""
    for seed in range(TEETH):
        with monkeypatch.context() as m:
            defect(m)
            problem = run_seed(seed)
        if problem is not None and sign in problem and run_seed(seed) is None:
            return problem
    return None


def deltas_of_formulas_only(
    ws: WriteSet, tables: dict[str, Table], before: Callable[[str, Key], Record | None]
) -> promises.Deltas:
    """Deltas counted from formulas alone: a row written by put (an add then a put pins
    it) counts nothing, so SERIALIZE admits its reservation without it."""
    kept = WriteSet()
    for table, key in ws.formulas or {}:
        kept.put(table, key, ws.tables[table][key])
    return _DELTAS(kept, tables, before)


def decode_without_formulas(text: str) -> tuple[WriteSet, dict[str, object]]:
    """A held write set reloaded without its formulas: its adds land as puts."""
    ws, extra = _DECODE(text)
    ws.formulas = None
    return ws, extra


def test_finds_deltas_that_ignore_put_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """An add-then-put promise sends SERIALIZE no deltas: an item's sum goes below 0."""

    def defect(m: pytest.MonkeyPatch) -> None:
        m.setattr(promises, "deltas", deltas_of_formulas_only)

    found = caught(monkeypatch, defect, "sum(qty)")
    assert found is not None, f"no seed of the first {TEETH} found it"


def test_finds_promises_landing_under_a_prepared_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A committed promise lands while a 2PC transaction prepared on its row holds a put
    of the row it read, which its commit then lands over the promise (a lost update)."""

    def defect(m: pytest.MonkeyPatch) -> None:
        m.setattr(Participant, "_locked", lambda self, ws: False)

    found = caught(monkeypatch, defect, ": qty")
    assert found is not None, f"no seed of the first {TEETH} found it"


def test_finds_held_writes_reloaded_without_formulas(monkeypatch: pytest.MonkeyPatch) -> None:
    """A promise held across a restart lands its add as a put of the row it read, over
    the adds that landed meanwhile."""

    def defect(m: pytest.MonkeyPatch) -> None:
        m.setattr(held_writes, "decode", decode_without_formulas)

    found = caught(monkeypatch, defect, ": qty")
    assert found is not None, f"no seed of the first {TEETH} found it"


def test_finds_a_promise_landing_the_row_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """An add-then-put promise held as the whole row it computed lands it over what a BASE
    or ACID transaction committed to the row's other fields meanwhile (a lost audit)."""

    def defect(m: pytest.MonkeyPatch) -> None:
        m.setattr(promises, "_as_changes", lambda ws, tables, before: None)

    found = caught(monkeypatch, defect, ": audits")
    assert found is not None, f"no seed of the first {TEETH} found it"


def test_finds_epoch_values_loaded_before_the_store_is_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below PL3 a spanning batch reads its epoch's starting values, which the engine
    keeps in its store; taken when the engine is built, before the store has replayed its
    changelog, they are stale after a crash, and a re-run batch reads a later value."""
    init = SpanRunner.__init__
    load = SpanRunner.load

    def loads_when_built(self: SpanRunner, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        load(self)

    def defect(m: pytest.MonkeyPatch) -> None:
        m.setattr(SpanRunner, "__init__", loads_when_built)
        m.setattr(SpanRunner, "load", lambda self: None)

    found = caught(monkeypatch, defect, " at PL")
    assert found is not None, f"no seed of the first {TEETH} found it"


def test_finds_a_promise_landing_on_a_row_a_queued_spanning_batch_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A committed promise that lands on a row whose value a queued spanning batch sent
    makes that row's engine run the batch on another value than the others did."""

    def defect(m: pytest.MonkeyPatch) -> None:
        m.setattr(SpanRunner, "reading", lambda self, ws: False)

    found = caught(monkeypatch, defect, ": audits")
    assert found is not None, f"no seed of the first {TEETH} found it"
