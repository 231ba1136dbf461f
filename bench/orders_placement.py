"""The order pipeline with spanning batches broadcast (every batch to every partition, as
before routing) against routed (each batch only to the partitions owning its keys), in
alternating pairs on the same machine, throughput only:

    .venv/bin/python bench/orders_placement.py --events 10000 --batch-sizes 1,10 --workers 1,2

Broadcast placement is had by making the producer place every spanning batch everywhere;
the engines take both kinds alike. Each run's result must equal the serial reference.
Prints one line per run and the ratio routed/broadcast per pair; JSON: --out.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from machine_info import write_report
from orders_bench import run_one

from orders.files import Shop
from orders.gen import generate
from orders.reference import run as reference
from orders.run import RunConfig
from txstream.config import Settings
from txstream.producer import BatchProducer
from txstream.stack.stack import Stack

_routed = BatchProducer._span_places


def _everywhere(self: BatchProducer, name: str, tuples: Any, partitions: int) -> list[int]:
    return list(range(partitions))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--items", type=int, default=50)
    p.add_argument("--customers", type=int, default=200)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--batch-sizes", default="1,10")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--data", type=Path, default=Path("build/bench/orders-data"))
    p.add_argument("--out", type=Path, default=Path("build/bench/orders_placement.json"))
    args = p.parse_args()
    settings = Settings()
    Stack(settings).up_kafka(lambda line: print(line, file=sys.stderr))
    generate(args.items, args.customers, args.events, 1, args.data)
    shop = Shop.read(args.data / "items.txt", args.data / "customers.txt", args.data / "events.txt")
    want = reference(shop).to_json()
    rows: list[dict[str, Any]] = []
    ok = True
    for k in map(int, args.batch_sizes.split(",")):
        for w in map(int, args.workers.split(",")):
            ratios = []
            for pair in range(args.pairs):
                got = {}
                order = ["broadcast", "routed"] if pair % 2 == 0 else ["routed", "broadcast"]
                for placement in order:
                    BatchProducer._span_places = (  # type: ignore[method-assign]
                        _everywhere if placement == "broadcast" else _routed
                    )
                    report = run_one(settings, shop, RunConfig(k, args.partitions, w))
                    equal = {x: report.result.to_json()[x] for x in want} == want
                    ok = ok and equal
                    got[placement] = report.events_per_s
                    rate = round(report.events_per_s, 1)
                    rows.append({"batch_size": k, "workers": w, "pair": pair,
                                 "placement": placement, "events_per_s": rate,
                                 "equals_reference": equal})  # fmt: skip
                    print(f"K={k} W={w} pair {pair} {placement}: {report.events_per_s:,.0f} "
                          f"events/s, equal {equal}", flush=True)  # fmt: skip
                ratios.append(got["routed"] / got["broadcast"])
            print(f"K={k} W={w}: routed/broadcast {', '.join(f'{r:.2f}' for r in ratios)} "
                  f"(median {statistics.median(ratios):.2f})", flush=True)  # fmt: skip
    write_report("bench/orders_placement.py", rows, args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
