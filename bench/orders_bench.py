"""The order pipeline: events/s and batch latency against the number of workers.

    .venv/bin/python bench/orders_bench.py --events 20000 --workers 1,2,4 --batch-sizes 1,10

For each batch size K and worker count W it runs the pipeline (`orders.run.OrdersRun`, as
`txstream orders run` does) on P partitions twice: once with every batch loaded at once,
for the throughput; then paced at half that rate, timing each batch from when it was due
to be sent until every partition had committed it (p50/p99). Every run's result is checked
against the serial reference; a mismatch fails the benchmark. Each run is a fresh app whose
topics are deleted after it. Prints the markdown table for docs/benchmarks.md; JSON: --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from machine_info import Column, markdown, percentile, write_report

from orders.files import Shop
from orders.gen import generate
from orders.reference import run as reference
from orders.run import OrdersRun, RunConfig, RunReport
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.stack.stack import Stack


def run_one(settings: Settings, shop: Shop, config: RunConfig) -> RunReport:
    what = f"K={config.batch_size} W={config.workers}"
    pace = "" if config.rate is None else f" at {config.rate:,.0f} batches/s"
    print(f"{what}{pace} ...", file=sys.stderr, flush=True)
    orders = OrdersRun(shop, config, settings)
    try:
        return orders.run()
    finally:
        admin = TopicAdmin(settings)
        admin.delete_topics(t for t in admin.list_topics() if t.startswith(f"{orders.app.name}."))


def measure(
    settings: Settings, shop: Shop, args: argparse.Namespace, k: int, w: int
) -> dict[str, Any]:
    want = reference(shop).to_json()
    full = run_one(settings, shop, RunConfig(k, args.partitions, w))
    half_rate = full.batches / full.elapsed_s / 2
    paced = run_one(settings, shop, RunConfig(k, args.partitions, w, rate=half_rate))
    equal = all({k: r.result.to_json()[k] for k in want} == want for r in (full, paced))
    lat = paced.latencies_ms
    return {
        "batch_size": k,
        "workers": w,
        "partitions": args.partitions,
        "events_per_s": round(full.events_per_s, 1),
        "batches_per_s": round(full.batches / full.elapsed_s, 1),
        "paced_batches_per_s": round(half_rate, 1),
        "p50_ms": round(percentile(lat, 50), 1),
        "p99_ms": round(percentile(lat, 99), 1),
        "equals_reference": equal,
    }


COLUMNS: list[Column] = [
    ("K", "batch_size", "d"),
    ("workers", "workers", "d"),
    ("partitions", "partitions", "d"),
    ("events/s", "events_per_s", ",.0f"),
    ("batches/s", "batches_per_s", ",.0f"),
    ("p50 at half load (ms)", "p50_ms", ",.1f"),
    ("p99 at half load (ms)", "p99_ms", ",.1f"),
    ("equals reference", "equals_reference", "yes"),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--items", type=int, default=50)
    p.add_argument("--customers", type=int, default=200)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--batch-sizes", default="1,10")
    p.add_argument("--data", type=Path, default=Path("build/bench/orders-data"))
    p.add_argument("--out", type=Path, default=Path("build/bench/orders_bench.json"))
    args = p.parse_args()
    settings = Settings()
    Stack(settings).up_kafka(lambda line: print(line, file=sys.stderr))
    generate(args.items, args.customers, args.events, 1, args.data)
    shop = Shop.read(args.data / "items.txt", args.data / "customers.txt", args.data / "events.txt")
    rows = [
        measure(settings, shop, args, int(k), int(w))
        for k in args.batch_sizes.split(",")
        for w in args.workers.split(",")
    ]
    write_report("bench/orders_bench.py", rows, args.out)
    print(markdown(rows, COLUMNS))
    return 0 if all(r["equals_reference"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
