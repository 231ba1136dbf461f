"""Query latency across partitions, per isolation level, idle and under a transfer load.

    .venv/bin/python bench/query_bench.py --partitions 8 --accounts 10000 --transfers 20000

TSpoon's transfers (`bank.stream_transfers`, a spanning procedure) on P partitions with W
workers and a coordinator. Each query sums every account (`sum:balance`, one aggregate row
from each engine), through the coordinator, as `txstream query` and the HTTP endpoint ask
it. First `--queries` of each level on the idle table; then the transfers are sent at once
and the levels take turns until every batch has committed. A query's latency is from the
client's request to its result. Money is conserved by every transfer, so a serializable or
snapshot answer must show the opening total; one that differs fails the benchmark. Read
committed answers may mix engines that are at different batches: how many did is reported.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from machine_info import Column, markdown, percentile, write_report
from transfers_bench import OPENING, TransfersRun, workload

from txstream.client import TxClient
from txstream.config import Settings
from txstream.stack.stack import Stack
from txstream.stack.supervisor import Policy, Supervised

LEVELS = ("read_committed", "snapshot", "serializable")
TOTAL = [("sum", "balance")]


def ask(client: TxClient, level: str) -> tuple[float, int, int | None]:
    """(seconds, the total, the batch a serializable answer is as of)."""
    started = time.perf_counter()
    r = client.query("accounts", isolation=level, aggregates=TOTAL)
    seconds = time.perf_counter() - started
    if not r.ok:
        raise RuntimeError(f"{level} query failed: {r.reason}: {r.detail}")
    ((_, row),) = r.table_rows()
    return seconds, int(row["sum_balance"]), r.at


def coordinator(run: TransfersRun) -> Supervised:
    argv = [str(Path(sys.executable).with_name("txstream")), "coordinator", "run", "--app",
            "bank.stream_transfers:from_params", "--params", json.dumps({"name": run.app.name}),
            "--metrics-port", "0"]  # fmt: skip
    return Supervised(f"{run.app.name}-coordinator", argv, run.settings, policy=Policy())


def measure(settings: Settings, args: argparse.Namespace) -> list[dict[str, Any]]:
    run = TransfersRun(settings, args, args.batch_size, args.workers)
    total = OPENING * args.accounts
    idle: dict[str, list[float]] = {level: [] for level in LEVELS}
    busy: dict[str, list[float]] = {level: [] for level in LEVELS}
    off: dict[str, int] = dict.fromkeys(LEVELS, 0)
    cuts: set[int] = set()
    services = run.start(coordinator(run))
    try:
        with TxClient(run.app.name, settings, timeout_s=60) as client:
            ask(client, "serializable")  # the coordinator is up and serving
            for level in LEVELS:
                for _ in range(args.queries):
                    idle[level].append(ask(client, level)[0])
            batches = run.send_transfers(workload(args.accounts, args.transfers, args.seed))
            print(f"{batches} batches sent; querying until they commit", file=sys.stderr)
            done = False
            while not done:
                for level in LEVELS:
                    seconds, got, at = ask(client, level)
                    busy[level].append(seconds)
                    off[level] += got != total
                    if at is not None and 0 < at < batches:
                        cuts.add(at)
                done = run.transfers_committed(batches)
    finally:
        run.stop(services)
        run.delete_topics()
    return [
        {
            "isolation": level,
            "partitions": args.partitions,
            "idle_p50_ms": percentile(idle[level], 50) * 1000,
            "idle_p99_ms": percentile(idle[level], 99) * 1000,
            "busy_queries": len(busy[level]),
            "busy_p50_ms": percentile(busy[level], 50) * 1000,
            "busy_p99_ms": percentile(busy[level], 99) * 1000,
            "totals_off": off[level],
            "cuts_during_load": len(cuts) if level != "read_committed" else None,
        }
        for level in LEVELS
    ]


COLUMNS: list[Column] = [
    ("isolation", "isolation", "s"),
    ("partitions", "partitions", "d"),
    ("idle p50 (ms)", "idle_p50_ms", ".1f"),
    ("idle p99 (ms)", "idle_p99_ms", ".1f"),
    ("queries under load", "busy_queries", "d"),
    ("under load p50 (ms)", "busy_p50_ms", ".1f"),
    ("under load p99 (ms)", "busy_p99_ms", ".1f"),
    ("totals off", "totals_off", "d"),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--accounts", type=int, default=10_000)
    p.add_argument("--transfers", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=10)
    p.add_argument("--queries", type=int, default=50, help="per level, on the idle table")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("build/bench/query_bench.json"))
    args = p.parse_args()
    settings = Settings()
    Stack(settings).up_kafka(lambda line: print(line, file=sys.stderr))
    rows = measure(settings, args)
    write_report("bench/query_bench.py", rows, args.out)
    print(markdown(rows, COLUMNS))
    cut = [r for r in rows if r["isolation"] != "read_committed"]
    print(f"\nsnapshot and serializable answers cut at {cut[-1]['cuts_during_load']} batches")
    return 0 if all(r["totals_off"] == 0 for r in cut) else 1


if __name__ == "__main__":
    sys.exit(main())
