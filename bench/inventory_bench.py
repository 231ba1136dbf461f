"""Reservations promised (BASIC, split commit) against the same reservations through 2PC,
in the same run, on the inventory app (`apps/inventory`).

    .venv/bin/python -m bench.inventory_bench --reservations 3000

The app runs on `--workers` workers over `--partitions` partitions with its coordinator, on
the running stack's broker (`make up`). Every item's stock is spread over `--sites` sites
(rows on every partition); then the same reservations (1-3 units at a random item and
site, only those whose site row is not on the item's partition, so each 2PC has two
participants) go through each path, `--in-flight` outstanding:
- promised: `reserve`, acknowledged once its partition's log has it; SERIALIZE commits it
  only while the item's total over all sites stays >= 0 (`sum(qty) >= 0 group by item`);
- 2PC: `take` on the site's row and `claim` on the item's available count (per-row
  constraint `qty >= 0`) in one transaction.
Reported per path: acknowledgement latency (the promise; 2PC's result), final status
latency, throughput to the final status, committed and aborted. Checked after: no item
oversold on either path, and each path's table holds the stock less its committed units.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import date

from bench.machine_info import machine, machine_text
from bench.ycsb_bench import txstream_app
from inventory import workload
from txstream.client import TxClient
from txstream.config import Settings


def pct(values: Sequence[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else 0


def row(path: str, outcomes: Sequence[workload.Outcome], seconds: float) -> tuple[str, float]:
    acks = [o.ack_s * 1000 for o in outcomes]
    finals = [o.final_s * 1000 for o in outcomes]
    ok = sum(o.status.ok for o in outcomes)
    text = (
        f"| {path} | {len(outcomes)} | {len(outcomes) / seconds:,.0f} | "
        f"{pct(acks, 50):.1f} | {pct(acks, 99):.1f} | {pct(finals, 50):.1f} | "
        f"{pct(finals, 99):.1f} | {ok} | {len(outcomes) - ok} |"
    )
    return text, pct(acks, 99)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=int, default=20)
    p.add_argument("--sites", type=int, default=8)
    p.add_argument("--stock", type=int, default=200, help="units of each item")
    p.add_argument("--reservations", type=int, default=3000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args()
    if args.partitions < 4:
        p.error("--partitions: the workload spreads items over at least 4")
    restocks, planned = workload.plan(
        args.items, args.sites, args.stock, args.reservations, args.seed
    )
    wanted = workload.apart(planned, args.partitions)
    settings = Settings()
    name = f"inventory-{uuid.uuid4().hex[:8]}"
    print(f"{name}: {args.workers} workers, {args.partitions} partitions, "
          f"{len(wanted)} reservations", file=sys.stderr)  # fmt: skip
    problems: list[str] = []
    rows: list[str] = []
    p99: dict[str, float] = {}
    factory = "inventory.dataflow:from_params"
    with (
        txstream_app(settings, name, args.partitions, args.workers, factory),
        TxClient(name, settings, timeout_s=120) as client,
    ):
        workload.open_sites(client, args.items, args.sites)
        stocked = workload.run_promises(client, restocks, "restock", args.in_flight)
        stocked += workload.run_two_phase(
            client, restocks, "acid_restock", "release", args.in_flight
        )
        if not all(o.status.ok for o in stocked):
            problems.append(f"restocking failed: {[o.status for o in stocked if not o.status.ok]}")
        paths = {
            "promised (BASIC)": lambda: workload.run_promises(
                client, wanted, "reserve", args.in_flight
            ),
            "2PC": lambda: workload.run_two_phase(client, wanted, "take", "claim", args.in_flight),
        }
        tables = {"promised (BASIC)": "stock", "2PC": "acid_stock"}
        for path, run in paths.items():
            started = time.perf_counter()
            outcomes = run()
            seconds = time.perf_counter() - started
            text, p99[path] = row(path, outcomes, seconds)
            rows.append(text)
            print(text, file=sys.stderr)
            if over := workload.oversold(restocks, outcomes):
                problems.append(f"{path}: oversold (stock, committed) {over}")
            reserved = workload.committed(outcomes)
            want = {i: args.stock - reserved[i] for i in range(1, args.items + 1)}
            deadline = time.monotonic() + 60
            while (held := workload.totals(client, tables[path], args.items)) != want:
                if time.monotonic() > deadline:
                    problems.append(f"{path}: table {tables[path]} holds {held}, not {want}")
                    break
                time.sleep(0.2)
    print(f"Date: {date.today()}. Machine: {machine_text(machine())}. Command: "
          f"`.venv/bin/python -m bench.inventory_bench {' '.join(sys.argv[1:])}`.")  # fmt: skip
    print("| path | reservations | per s | ack p50 ms | ack p99 ms | final p50 ms | "
          "final p99 ms | committed | aborted |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for text in rows:
        print(text)
    ratio = p99["2PC"] / p99["promised (BASIC)"]
    print(f"acknowledgement p99: 2PC / promised = {ratio:.1f}x")
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
