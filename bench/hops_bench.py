"""Repartitioned edges: events/s through the sales app (`orders.sales`), by workers, batch
size and the kind of edge.

    .venv/bin/python bench/hops_bench.py --events 20000 --workers 1,2 --batch-sizes 1,10

Order events, keyed by customer, run `accept` on the customer's engine; its accepted orders
cross to the item's engine through `tally`'s topic. For each batch size K, worker count W
and edge kind (ordered: parts in batch-id order by progress markers; arrival: as they
come), a fresh app on P partitions is warmed up, then sent every event at once, with a
progress mark to every partition after them, and timed until every part of the edge has
run and committed. The committed counts are checked against the serial reference; a
mismatch fails the benchmark. Prints the markdown table for docs/benchmarks.md; JSON: --out.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from machine_info import write_report

from orders.sales import parts, reference
from orders.sales_run import SalesRun, sales_events
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.routing import partition_of
from txstream.stack.stack import Stack

WARM_UP = 400  # events before the timed ones


def measure(
    settings: Settings, args: argparse.Namespace, k: int, w: int, ordered: bool
) -> dict[str, Any]:
    kind = "ordered" if ordered else "arrival"
    print(f"K={k} W={w} {kind} ...", file=sys.stderr, flush=True)
    p = args.partitions
    events = sales_events(seed=1, n=WARM_UP + args.events)
    batches = [events[i : i + k] for i in range(0, len(events), k)]
    owner = lambda key: partition_of((key,), p)  # noqa: E731
    customers, items, _ = reference(batches, owner)
    warm = parts(batches[: WARM_UP // k], owner)
    run = SalesRun(settings, p, w, ordered)
    try:
        run.start()
        run.produce(events[:WARM_UP], k)
        run.wait_parts(warm, args.timeout_s)
        started = time.monotonic()
        run.produce(events[WARM_UP:], k)
        run.wait_parts(parts(batches, owner), args.timeout_s)
        elapsed = time.monotonic() - started
    finally:
        run.stop()
    equal = run.counts() == {"customer_sales": customers, "item_sales": items}
    admin = TopicAdmin(settings)
    admin.delete_topics(t for t in admin.list_topics() if t.startswith(f"{run.app.name}."))
    return {
        "batch_size": k,
        "workers": w,
        "partitions": p,
        "edge": kind,
        "events_per_s": round(args.events / elapsed, 1),
        "batches_per_s": round(args.events / k / elapsed, 1),
        "equals_reference": equal,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| K | workers | partitions | edge | events/s | batches/s | equals reference |",
        "|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch_size']} | {r['workers']} | {r['partitions']} | {r['edge']} | "
            f"{r['events_per_s']:,.0f} | {r['batches_per_s']:,.0f} | "
            f"{'yes' if r['equals_reference'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=20_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--batch-sizes", default="1,10")
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--out", type=Path, default=Path("build/bench/hops_bench.json"))
    args = p.parse_args()
    settings = Settings()
    Stack(settings).up_kafka(lambda line: print(line, file=sys.stderr))
    rows = [
        measure(settings, args, int(k), int(w), ordered)
        for k in args.batch_sizes.split(",")
        for w in args.workers.split(",")
        for ordered in (True, False)
    ]
    write_report("bench/hops_bench.py", rows, args.out)
    print(table(rows))
    return 0 if all(r["equals_reference"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
