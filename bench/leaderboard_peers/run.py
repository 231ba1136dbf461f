"""Leaderboard: txstream and its peers on the same votes, each checked against the reference.

    .venv/bin/python -m bench.leaderboard_peers --votes 10000 --threshold 2500   # make bench
    .venv/bin/python -m bench.leaderboard_peers --votes 100000                   # bench-full

Systems (issue 9): (a) `sync`, a client calling the three procedures as PostgreSQL
transactions; (b) `faust`, a Faust agent calling PostgreSQL per batch; (c) `quix`, Quix
Streams with exactly-once and RocksDB state; (d) `txstream`, all guarantees, and `relaxed`,
txstream with the votes partitioned (order per partition only). A private
PostgreSQL cluster is started for (a) and (b) and removed after. With `--latency`, the
end-to-end latency is then measured at paced rates: with Quix Streams in the run, txstream's
and Quix's at the same offered rates, 25% and 50% of the throughput Quix reached here (both
can sustain them); without it, txstream's at 25/50/75% of its own.
Writes docs/figures/leaderboard_peers.{json,png} and prints the markdown for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.leaderboard_peers import (
    faust_pg,
    latency,
    quix,
    quix_latency,
    report,
    sync_oltp,
    txstream_partitioned,
    txstream_peer,
)
from bench.leaderboard_peers.check import Measured, differences
from bench.leaderboard_peers.postgres import Cluster, private_cluster
from bench.leaderboard_peers.topics import delete_topics_with
from bench.machine_info import crowded_warning, machine, machine_text
from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from tests.support.reference.leaderboard_ref import run_reference
from txstream.config import Settings
from txstream.cpus import cpu_text
from txstream.stack.broker import KafkaBroker

ROOT = Path(__file__).resolve().parents[2]
SYSTEMS = ("sync", "faust", "quix", "txstream", "relaxed")
# With Quix Streams in the run, both are paced at these fractions of Quix's maximum: rates
# both can sustain.
PEER_FRACTIONS = (0.25, 0.50)
NAMES = {
    "sync": "client + PostgreSQL, sync OLTP (H-Store sync analog)",
    "faust": "Faust agent + PostgreSQL (Storm/Esper + VoltDB analog)",
    "quix": "Quix Streams, exactly-once, RocksDB state",
    "txstream": "txstream, all guarantees (changelog recovery)",
    "relaxed": "txstream, ordering relaxed (partitioned)",
}
console = Console(stderr=True)


def measure(system: str, runner: Callable[[], Measured], reference: dict[str, Any]) -> Measured:
    """Run one system; a failure is reported as such, never dropped."""
    console.print(f"[bold]{NAMES[system]}[/bold] ...")
    try:
        result = runner()
    except Exception as e:
        traceback.print_exc()
        return Measured(NAMES[system], "", 0, 0.0, "", None, error=f"{type(e).__name__}: {e}")
    assert result.doc is not None
    result.differences = differences(result.doc, reference)
    wrong = ", ".join(d.split(":")[0] for d in result.differences)
    verdict = "correct" if result.correct else f"INCORRECT ({wrong} differ)"
    console.print(
        f"  {result.batches:,} batches in {result.seconds:.2f}s = "
        f"{result.rate:,.0f} batches/s, {verdict}"
    )
    return result


def run_all(
    args: argparse.Namespace,
    votes: Path,
    work: Path,
    reference: dict[str, Any],
    cluster: Cluster | None,
    settings: Settings,
    tags: list[str],
) -> list[Measured]:
    """Each chosen system in turn; `tags` collects the names of the topics they create."""
    params = Params(args.contestants, args.threshold, args.max_votes, args.window, args.slide)
    k, timeout = args.batch_size, args.timeout_s
    runners: dict[str, Callable[[], Measured]] = {
        "txstream": lambda: txstream_peer.run(settings, votes, params, k, work, timeout),
        "quix": lambda: quix.run(settings, votes, params, k, work, timeout, tags),
        "relaxed": lambda: txstream_partitioned.run(
            settings, votes, params, k, args.partitions, timeout, tags
        ),
    }
    if cluster is not None:
        runners["sync"] = lambda: sync_oltp.run(cluster.dsn, votes, params, k)
        runners["faust"] = lambda: faust_pg.run(
            settings, cluster.dsn, votes, params, k, work, timeout, tags
        )
    return [measure(s, runners[s], reference) for s in args.systems]


def cpu_placement(settings: Settings) -> str:
    """Which CPUs the broker, and the workers and peers, ran on (`kafka_cpus`,
    `worker_cpus`): the broker's as its process has them, since it was started apart."""
    every = cpu_text(frozenset(os.sched_getaffinity(0)))
    pid = KafkaBroker(settings).process.live_pid()
    broker = "external" if pid is None else cpu_text(frozenset(os.sched_getaffinity(pid)))
    workers = cpu_text(settings.worker_cpu_set) or every
    if broker == every == workers:
        return f"any of {every} for every process"
    return f"broker {broker}, workers and peers {workers}, the load generators any of {every}"


def systems(text: str) -> list[str]:
    chosen = [s.strip() for s in text.split(",") if s.strip()]
    unknown = set(chosen) - set(SYSTEMS)
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"systems are {', '.join(SYSTEMS)}; got {text}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.leaderboard_peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--votes", type=int, default=20_000, help="votes (= batches at K=1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--contestants", type=int, default=50)
    parser.add_argument("--threshold", type=int, default=20_000)
    parser.add_argument("--max-votes", type=int, default=1)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--slide", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument(
        "--systems",
        type=systems,
        default=list(SYSTEMS),
        help=f"comma-separated, from {','.join(SYSTEMS)}",
    )
    parser.add_argument(
        "--latency",
        action="store_true",
        help="then the latency at paced rates: with quix among --systems, txstream's and "
        "Quix's at the same rates, 25%% and 50%% of Quix's throughput; else txstream's at "
        "25/50/75%% of its own",
    )
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=10.0,
        help="seconds of paced input per latency level",
    )
    parser.add_argument("--partitions", type=int, default=2, help="for `relaxed`")
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--figures", type=Path, default=ROOT / "docs/figures")
    args = parser.parse_args()

    params = Params(args.contestants, args.threshold, args.max_votes, args.window, args.slide)
    host = machine(Settings())  # before any system creates its topics
    if (warning := crowded_warning(host)) is not None:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    meta: dict[str, Any] = {
        "date": str(date.today()),
        "command": " ".join(
            [".venv/bin/python -m bench.leaderboard_peers", *map(shlex.quote, sys.argv[1:])]
        ),
        "machine": host,
        "machine_text": machine_text(host),
        "cpus": cpu_placement(Settings()),
        "votes": args.votes,
        "batch_size": args.batch_size,
        "params": ", ".join(f"{k}={v}" for k, v in asdict(params).items())
        + f", batch_size={args.batch_size}",
    }
    tags: list[str] = []
    with tempfile.TemporaryDirectory(prefix="txstream-peers-") as tmp:
        work = Path(tmp)
        # A home of its own (pidfiles, logs, engine state), deleted with the run; the shared
        # broker is named as external, so nothing here starts or stops one.
        settings = Settings(home=work / "home", kafka_bootstrap=Settings().bootstrap_servers)
        votes = work / "votes.txt"
        write_votes_file(votes, args.votes, contestants=args.contestants, seed=args.seed)
        reference = run_reference(
            votes,
            args.contestants,
            args.threshold,
            args.max_votes,
            args.window,
            args.slide,
            args.batch_size,
        )
        needs_pg = {"sync", "faust"} & set(args.systems)
        try:
            if needs_pg:
                with private_cluster() as cluster:
                    meta["postgresql"] = cluster.version
                    results = run_all(args, votes, work, reference, cluster, settings, tags)
            else:
                results = run_all(args, votes, work, reference, None, settings, tags)
            tags += [str(r.doc["app"]) for r in results if r.doc and "app" in r.doc]
            levels: list[latency.Level] = []
            base = report.baseline(results)
            quix_run = next((r for r in results if r.system.startswith("Quix") and r.correct),
                            None)  # fmt: skip
            if args.latency:
                if base is None:
                    console.print("[red]no correct txstream run: latency skipped[/red]")
                elif quix_run is not None:  # both at the same rates, fractions of Quix's max
                    meta["latency_of"] = quix_latency.SYSTEM

                    def peer(rate: float, votes: Path, fraction: float) -> latency.Level:
                        return quix_latency.measure_level(
                            settings, params, args.batch_size, rate, votes, fraction, work, tags
                        )

                    levels = latency.run(
                        settings, params, args.batch_size, quix_run.rate,
                        args.latency_seconds, args.seed, work, tags, PEER_FRACTIONS, peer,
                    )  # fmt: skip
                else:
                    levels = latency.run(
                        settings,
                        params,
                        args.batch_size,
                        base.rate,
                        args.latency_seconds,
                        args.seed,
                        work,
                        tags,
                    )
        finally:
            delete_topics_with(settings, tags)
    args.figures.mkdir(parents=True, exist_ok=True)
    doc = report.document(results, meta)
    doc["latency"] = [asdict(level) for level in levels]
    (args.figures / "leaderboard_peers.json").write_text(json.dumps(doc, indent=2) + "\n")
    report.plot(results, meta, args.figures / "leaderboard_peers.png")
    print(report.markdown(results, meta))
    if levels:
        latency.plot(levels, meta, args.figures / "leaderboard_latency.png")
        print()
        print(latency.markdown(levels, meta))
    if any(not r.correct for r in results):
        console.print("[yellow]some systems failed or computed a different result (above)")
