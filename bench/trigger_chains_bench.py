"""S-Store's trigger micro-benchmarks, Figures 6 (EE triggers) and 7 (PE triggers), 1..10.

    .venv/bin/python bench/trigger_chains_bench.py                      # lengths 1..10
    .venv/bin/python bench/trigger_chains_bench.py --lengths 1,5,10 --batches 2000

Fig. 6, EE triggers (`apps/chain/ee.py`): one procedure per batch writes e0, and an
`on_insert` trigger on each table writes the next, inside the same TE; against the same
writes issued by the procedure itself (S-Store's "H-Store" line, no triggers).
Fig. 7, PE triggers (`apps/chain`): sp1..spN, each its own TE per batch, fused in the
partition engine by PE triggers; against a client that calls N PostgreSQL procedures per
batch, each its own transaction, waiting for each (S-Store's client-driven H-Store line).

txstream runs on one in-process engine with changelog recovery and group commit (100 ms or
5,000 batches); the clock runs from after `task.open()` to the commit of the last batch.
Every run's final state is checked against a serial computation (`tests/reference`).
Writes JSON and fig6_ee_triggers.png, fig7_pe_triggers.png; prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

import psycopg
from leaderboard_peers.postgres import private_cluster
from machine_info import machine, machine_text
from matplotlib.figure import Figure
from recovery_bench import (
    GROUP_ON,
    delete_topics,
    feed,
    ints,
    no_snapshots,
    positive,
    run_home,
    timeout_for,
)
from rich.console import Console

from chain import ee
from chain.dataflow import build_app as pe_chain
from chain.load import batch_tuples, load_batches
from txstream.config import Settings
from txstream.model.app import App
from txstream.model.declarations import RecoveryMode
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for the serial references in tests/reference
from tests.support.reference.chain_ref import chain_totals  # noqa: E402

SEED = 1
console = Console(stderr=True)
PG_CHAIN = """
CREATE TABLE totals (stage integer, bucket integer, value bigint NOT NULL,
                     batches bigint NOT NULL, PRIMARY KEY (stage, bucket));
CREATE FUNCTION chain_stage(p_stage integer, p_bucket integer, p_value bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO totals VALUES (p_stage, p_bucket, p_value, 1) ON CONFLICT (stage, bucket)
    DO UPDATE SET value = totals.value + excluded.value, batches = totals.batches + 1
$$;
"""


@dataclass(frozen=True)
class Point:
    figure: str  # "6" or "7"
    system: str
    length: int
    batches: int
    seconds: float
    batches_per_s: float
    correct: bool


def txstream_run(base: Settings, app: App, batches: int) -> tuple[float, dict[str, Any]]:
    """Seconds from after open to the last batch committed, and the committed tables."""
    with run_home(base) as settings:
        last = load_batches(settings, app, batches, batch_size=1, seed=SEED)
        task = PartitionTask(app, 0, settings, GROUP_ON, no_snapshots(RecoveryMode.CHANGELOG))
        pump = TaskPump(task, task.open())
        started = time.monotonic()
        try:
            feed(pump, last, timeout_for(batches))
            elapsed = time.monotonic() - started
            tables = task.tables()
        finally:
            pump.close()
            task.close()
        delete_topics(settings, app)
    return elapsed, tables


def ee_expected(length: int, batches: int) -> dict[str, dict[tuple[int], dict[str, int]]]:
    last: dict[int, int] = {}
    for b in range(1, batches + 1):
        for tup in batch_tuples(b, 1, SEED):
            last[tup["key"]] = tup["value"]
    return {
        f"e{i}": {(k,): {"key": k, "value": v + i} for k, v in last.items()} for i in range(length)
    }


def fig6(base: Settings, length: int, batches: int) -> list[Point]:
    points = []
    for triggers in (True, False):
        app = ee.build_app(length, name=_name("fig6", length), triggers=triggers)
        seconds, tables = txstream_run(base, app, batches)
        correct = {t: tables.get(t, {}) for t in app.decl.tables} == ee_expected(length, batches)
        system = "txstream, EE triggers" if triggers else "txstream, statements in the procedure"
        points.append(Point("6", system, length, batches, seconds, batches / seconds, correct))
    return points


def fig7(
    base: Settings, dsn: str | None, length: int, batches: int, pg_batches: int
) -> list[Point]:
    app = pe_chain(length, name=_name("fig7", length))
    seconds, tables = txstream_run(base, app, batches)
    correct = tables.get("totals", {}) == chain_totals(length, batches, 1, SEED)
    points = [
        Point("7", "txstream, PE triggers", length, batches, seconds, batches / seconds, correct)
    ]
    if dsn is not None:
        seconds, totals = client_chain(dsn, length, pg_batches)
        correct = totals == chain_totals(length, pg_batches, 1, SEED)
        points.append(
            Point(
                "7",
                "client + PostgreSQL, a transaction per procedure",
                length,
                pg_batches,
                seconds,
                pg_batches / seconds,
                correct,
            )
        )
    return points


def client_chain(
    dsn: str, length: int, batches: int
) -> tuple[float, dict[tuple[int, int], dict[str, int]]]:
    """The client drives the chain: per batch it calls stage 0..length-1 in order, each an
    autocommitted transaction, waiting for each answer."""
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0) as conn:
        conn.execute(
            "DROP TABLE IF EXISTS totals; DROP FUNCTION IF EXISTS chain_stage", prepare=False
        )
        conn.execute(PG_CHAIN, prepare=False)
        inputs = [batch_tuples(b, 1, SEED) for b in range(1, batches + 1)]
        cur = conn.cursor()
        started = time.monotonic()
        for tuples in inputs:
            for stage in range(length):
                for t in tuples:
                    cur.execute(
                        "SELECT chain_stage(%s, %s, %s)", (stage, t["key"] % 16, t["value"] + stage)
                    )
        elapsed = time.monotonic() - started
        rows = conn.execute("SELECT stage, bucket, value, batches FROM totals").fetchall()
    return elapsed, {(s, b): {"value": v, "batches": n} for s, b, v, n in rows}


def _name(tag: str, length: int) -> str:
    return f"bench-{tag}-l{length}-{time.time_ns() % 10**10}"


def plot(points: Sequence[Point], figure: str, title: str, path: Path) -> None:
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for system in dict.fromkeys(p.system for p in points if p.figure == figure):
        rows = sorted(
            (p for p in points if p.figure == figure and p.system == system), key=lambda p: p.length
        )
        ax.plot([p.length for p in rows], [p.batches_per_s for p in rows], marker="o", label=system)
        for p in rows:
            if not p.correct:
                ax.annotate("incorrect", (p.length, p.batches_per_s), color="tab:red")
    ax.set_xticks(sorted({p.length for p in points}))
    ax.set_xlabel("chain length")
    ax.set_ylabel("throughput (batches/s, 1 tuple per batch)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=150)


def table(points: Sequence[Point], figure: str) -> list[str]:
    systems = list(dict.fromkeys(p.system for p in points if p.figure == figure))
    cell = {(p.system, p.length): p for p in points if p.figure == figure}
    out = ["| chain length | " + " | ".join(systems) + " |", "|---:|" + "---:|" * len(systems)]
    for n in sorted({p.length for p in points if p.figure == figure}):
        vals = [cell.get((s, n)) for s in systems]
        out.append(
            f"| {n} | "
            + " | ".join(
                "" if p is None else f"{p.batches_per_s:,.0f}" + ("" if p.correct else " INCORRECT")
                for p in vals
            )
            + " |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", type=ints, default=list(range(1, 11)))
    parser.add_argument("--batches", type=positive, default=20000, help="per txstream run")
    parser.add_argument(
        "--pg-batches",
        type=positive,
        default=1000,
        help="per client + PostgreSQL run (N transactions per batch)",
    )
    parser.add_argument("--no-postgres", action="store_true", help="txstream lines only")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/figures/trigger_chains.json")
    parser.add_argument("--figures", type=Path, default=ROOT / "docs/figures")
    args = parser.parse_args()
    base = Settings()
    meta: dict[str, Any] = {
        "date": str(date.today()),
        "command": " ".join(
            [".venv/bin/python bench/trigger_chains_bench.py", *map(shlex.quote, sys.argv[1:])]
        ),
        "machine": machine(),
    }
    points: list[Point] = []

    def run(dsn: str | None) -> None:
        for length in args.lengths:
            for p in fig6(base, length, args.batches) + fig7(
                base, dsn, length, args.batches, args.pg_batches
            ):
                mark = "" if p.correct else " [red]INCORRECT[/red]"
                console.print(
                    f"fig {p.figure} {p.system}, length {p.length}: "
                    f"{p.batches_per_s:,.0f} batches/s{mark}"
                )
                points.append(p)

    if args.no_postgres:
        run(None)
    else:
        with private_cluster() as cluster:
            meta["postgresql"] = cluster.version
            run(cluster.dsn)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({**meta, "points": [asdict(p) for p in points]}, indent=2) + "\n"
    )
    args.figures.mkdir(parents=True, exist_ok=True)
    plot(
        points, "6", "Fig. 6: EE-trigger chain inside one TE", args.figures / "fig6_ee_triggers.png"
    )
    plot(
        points,
        "7",
        "Fig. 7: PE-trigger chain, one TE per procedure",
        args.figures / "fig7_pe_triggers.png",
    )
    print(
        f"Date: {meta['date']}. Machine: {machine_text(meta['machine'])}. "
        f"Command: `{meta['command']}`.\n"
    )
    print(
        "\n".join(
            [
                "Fig. 6, EE triggers (batches/s)",
                "",
                *table(points, "6"),
                "",
                "Fig. 7, PE triggers (batches/s)",
                "",
                *table(points, "7"),
            ]
        )
    )
    if not all(p.correct for p in points):
        sys.exit("some runs computed a different state (marked INCORRECT above)")


if __name__ == "__main__":
    main()
