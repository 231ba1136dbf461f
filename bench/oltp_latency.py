"""One client, one operation at a time: the latency of each single-partition path alone.

    .venv/bin/python -m bench.oltp_latency --ops 300

On the `ycsb` app (`apps/ycsb`, `--workers` workers over `--partitions` partitions, with its
coordinator, on the running stack's broker), after loading `--records` rows: a point read
of committed state (`TxClient.read`), a read-only call (`call(read_only=True)`), a direct
transaction (the `read` procedure sent as a transaction, answered with a group commit) and
a direct update. Nothing else is in flight, so each figure is the path's own round trip,
not queueing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import date

from bench.machine_info import machine, machine_text
from bench.ycsb_bench import txstream_app, txstream_load
from txstream.client import TxClient, fragment
from txstream.config import Settings


def timed(n: int, op: Callable[[int], object]) -> list[float]:
    out = []
    for k in range(n):
        t0 = time.perf_counter()
        op(k)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", type=int, default=300, help="operations per path")
    p.add_argument("--records", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    settings = Settings()
    name = f"ycsb-{uuid.uuid4().hex[:8]}"
    n = args.records

    def checked(r: object) -> None:
        if not getattr(r, "ok", True):
            raise RuntimeError(f"failed: {r}")

    paths: dict[str, Callable[[TxClient], Callable[[int], object]]] = {
        "point read (committed state)": lambda c: lambda k: c.read("usertable", k % n),
        "read-only call": lambda c: (
            lambda k: checked(c.call([fragment(k % n, "read", id=k % n)], read_only=True))
        ),
        "direct transaction, read": lambda c: (
            lambda k: checked(c.call([fragment(k % n, "read", id=k % n)]))
        ),
        "direct transaction, update": lambda c: (
            lambda k: checked(
                c.call([fragment(k % n, "update", id=k % n, field="field0", value=f"v{k}")])
            )
        ),
    }
    rows = []
    with txstream_app(settings, name, args.partitions, args.workers), TxClient(name) as client:
        txstream_load(client, n, args.partitions)
        for label, make in paths.items():
            op = make(client)
            timed(20, op)  # warm: connections, caches
            lat = sorted(timed(args.ops, op))
            rows.append((label, statistics.median(lat), lat[int(len(lat) * 0.9)], lat[-1]))
            print(f"{label}: p50 {rows[-1][1]:.1f} ms", file=sys.stderr)
    print(f"Date: {date.today()}. Machine: {machine_text(machine())}. Command: "
          f"`.venv/bin/python -m bench.oltp_latency {' '.join(sys.argv[1:])}`.")  # fmt: skip
    print("| path | p50 ms | p90 ms | max ms |")
    print("|---|---:|---:|---:|")
    for label, p50, p90, top in rows:
        print(f"| {label} | {p50:.1f} | {p90:.1f} | {top:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
