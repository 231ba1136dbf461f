"""Bank transfers per second (TSpoon's workload), single- and multi-partition, with aborts.

    .venv/bin/python bench/bank_bench.py --accounts 100000 --transfers 3000

For each mix (only single-partition pairs, only multi-partition pairs, TSpoon's uniform
random pairs) it runs `txstream bank run` in-process: 2 worker processes over 4 partition
engines, one coordinator, one client keeping 256 transfers in flight, and a snapshot query
totalling every account every 5 s (`--snapshot-every-s`; each costs the engines about 1 s
per 100k accounts, so frequent snapshots cut throughput sharply). Each run is a fresh app;
its topics are deleted after it. The money must be conserved in every snapshot, or the run
is reported as failed. Prints the markdown table for docs/benchmarks.md, writes JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import uuid
from datetime import date
from pathlib import Path
from typing import Any

from machine_info import crowded_warning, machine, machine_text

from bank.run import BankConfig, BankReport, BankRun
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.stack.stack import Stack

TSPOON_PER_S = 8580  # 50 cores, PL3
VOLTDB_MULTI_PER_S = 344


def run_one(settings: Settings, args: argparse.Namespace, mix: str) -> BankReport:
    name = f"bankbench_{mix}_{uuid.uuid4().hex[:8]}"
    config = BankConfig(
        args.accounts,
        args.transfers,
        args.partitions,
        args.workers,
        args.in_flight,
        seed=1,
        name=name,
        mix=mix,
        snapshot_every_s=args.snapshot_every_s,
        direct_via=args.direct_via,
    )
    print(f"{mix}: {args.transfers} transfers ...", file=sys.stderr, flush=True)
    try:
        return BankRun(config, settings).run()
    finally:
        if not args.keep_topics:
            admin = TopicAdmin(settings)
            admin.delete_topics(t for t in admin.list_topics() if t.startswith(f"{name}."))


def row(mix: str, r: BankReport) -> dict[str, Any]:
    n = sum(r.outcomes.values()) or 1
    aborted = {k: v for k, v in r.outcomes.items() if "aborted" in k}
    return {
        "mix": mix,
        "transfers_per_s": round(r.rate(""), 1),
        "single_per_s": round(r.rate("single"), 1),
        "multi_per_s": round(r.rate("multi"), 1),
        "abort_rate": round(sum(aborted.values()) / n, 4),
        "aborts": aborted,
        "unknown": r.unknown,
        "elapsed_s": round(r.elapsed_s, 1),
        "snapshots": len(r.snapshots),
        "conserved": not r.violations(),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| mix | transfers/s | single-partition/s | multi-partition/s | abort rate | "
        "aborts by reason | snapshots | money conserved |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(r["aborts"].items())) or "none"
        lines.append(
            f"| {r['mix']} | {r['transfers_per_s']:,.0f} | {r['single_per_s']:,.0f} | "
            f"{r['multi_per_s']:,.0f} | {r['abort_rate']:.1%} | {reasons} | {r['snapshots']} | "
            f"{'yes' if r['conserved'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--accounts", type=int, default=100_000)
    p.add_argument("--transfers", type=int, default=5000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--in-flight", type=int, default=256)
    p.add_argument(
        "--snapshot-every-s",
        type=float,
        default=5.0,
        help="a snapshot totals all accounts: ~1 s of engine time per 100k",
    )
    p.add_argument("--mixes", default="single,multi,uniform")
    p.add_argument(
        "--direct-via",
        choices=["kafka", "endpoint"],
        default="kafka",
        help="how single-partition transfers reach their engine: its Kafka input, or the "
        "owning worker's endpoint over HTTP",
    )
    p.add_argument("--out", type=Path, default=Path("docs/figures/bank_bench.json"))
    p.add_argument("--keep-topics", action="store_true")
    args = p.parse_args()
    settings = Settings()
    Stack(settings).up_kafka(lambda line: print(line, file=sys.stderr))
    m = machine(settings)  # before the runs create their topics
    if (warning := crowded_warning(m)) is not None:
        print(f"warning: {warning}", file=sys.stderr)
    rows = [row(mix, run_one(settings, args, mix)) for mix in args.mixes.split(",")]
    doc = {
        "date": date.today().isoformat(),
        "machine": m,
        "command": " ".join(
            [".venv/bin/python bench/bank_bench.py", *map(shlex.quote, sys.argv[1:])]
        ),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "rows": rows,
        "anchors": {"tspoon_per_s": TSPOON_PER_S, "voltdb_multi_per_s": VOLTDB_MULTI_PER_S},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\n{doc['date']}, {machine_text(m)}; `{doc['command']}`\n")
    print(table(rows))
    multi = next((r["multi_per_s"] for r in rows if r["mix"] == "multi"), None)
    if multi is not None:
        print(
            f"\nmulti-partition vs VoltDB's {VOLTDB_MULTI_PER_S}/s: "
            f"{multi / VOLTDB_MULTI_PER_S:.2f}x"
        )
    return 0 if all(r["conserved"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
