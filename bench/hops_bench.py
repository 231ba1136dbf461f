"""Repartitioned edges: events/s through the sales app (`orders.sales`), by workers, batch
size and the kind of edge.

    .venv/bin/python bench/hops_bench.py --events 20000 --workers 1,2 --batch-sizes 1,10

Order events, keyed by customer, run `accept` on the customer's engine; its accepted orders
cross to the item's engine through `tally`'s topic. For each batch size K, worker count W
and edge kind (ordered: batch by batch in batch-id order, by progress markers; arrival:
each part as it comes), a fresh app on P partitions is warmed up, then sent every event at
once, with a progress mark to every partition after them, and timed until every TE of
`tally` has committed; then a second fresh app is sent the same events paced at half that
rate (progress marks every 20 ms), each event timed from when it was due to be sent until
its running total's commit is seen (p50/p99). The committed counts are checked against the
serial reference; a mismatch fails the benchmark. Prints the markdown table for
docs/benchmarks.md; JSON: --out.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

from machine_info import Column, markdown, percentile, write_report

from orders.sales import reference, tally_runs
from orders.sales_run import SalesRun, sales_events
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.routing import partition_of
from txstream.stack.stack import Stack

WARM_UP = 400  # events before the timed ones


def one_run(
    settings: Settings,
    args: argparse.Namespace,
    k: int,
    w: int,
    ordered: bool,
    rate: float | None,
) -> tuple[float, list[float], bool]:
    """A fresh app warmed up, then the timed events (paced at `rate` batches/s, or all at
    once): (seconds until every part committed, per-event delays in ms when paced, whether
    the counts equal the serial reference)."""
    p = args.partitions
    events = sales_events(seed=1, n=WARM_UP + args.events)
    batches = [events[i : i + k] for i in range(0, len(events), k)]
    owner = lambda key: partition_of((key,), p)  # noqa: E731
    customers, items, _ = reference(batches, owner)
    run = SalesRun(settings, p, w, ordered)
    due: dict[int, float] = {}
    try:
        run.start()
        run.produce(events[:WARM_UP], k)
        run.wait_totals(tally_runs(batches[: WARM_UP // k], owner, ordered), args.timeout_s)
        started = time.monotonic()
        pacer = threading.Thread(target=run.produce, args=(events[WARM_UP:], k, rate, due))
        pacer.start()
        delays = run.wait_totals(
            tally_runs(batches, owner, ordered), args.timeout_s, due if rate else None
        )
        elapsed = time.monotonic() - started
        pacer.join()
    finally:
        run.stop()
    equal = run.counts() == {"customer_sales": customers, "item_sales": items}
    admin = TopicAdmin(settings)
    admin.delete_topics(t for t in admin.list_topics() if t.startswith(f"{run.app.name}."))
    return elapsed, delays, equal


def measure(
    settings: Settings, args: argparse.Namespace, k: int, w: int, ordered: bool
) -> dict[str, Any]:
    kind = "ordered" if ordered else "arrival"
    print(f"K={k} W={w} {kind} ...", file=sys.stderr, flush=True)
    elapsed, _, equal = one_run(settings, args, k, w, ordered, None)
    rate = args.events / k / elapsed
    print(f"K={k} W={w} {kind} at {rate / 2:,.0f} batches/s ...", file=sys.stderr, flush=True)
    _, delays, paced_equal = one_run(settings, args, k, w, ordered, rate / 2)
    return {
        "batch_size": k,
        "workers": w,
        "partitions": args.partitions,
        "edge": kind,
        "events_per_s": round(args.events / elapsed, 1),
        "batches_per_s": round(rate, 1),
        "p50_ms": round(percentile(delays, 50), 1),
        "p99_ms": round(percentile(delays, 99), 1),
        "equals_reference": equal and paced_equal,
    }


COLUMNS: list[Column] = [
    ("K", "batch_size", "d"),
    ("workers", "workers", "d"),
    ("partitions", "partitions", "d"),
    ("edge", "edge", "s"),
    ("events/s", "events_per_s", ",.0f"),
    ("batches/s", "batches_per_s", ",.0f"),
    ("p50 at half load (ms)", "p50_ms", ",.1f"),
    ("p99 at half load (ms)", "p99_ms", ",.1f"),
    ("equals reference", "equals_reference", "yes"),
]


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
    print(markdown(rows, COLUMNS))
    return 0 if all(r["equals_reference"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
