"""One client, one operation at a time: the latency of each single-partition path alone.

    .venv/bin/python -m bench.oltp_latency --ops 300

On the `ycsb` app (`apps/ycsb`, `--workers` workers over `--partitions` partitions, with its
coordinator, on the running stack's broker), after loading `--records` rows: a point read
of committed state (`TxClient.read`), a read-only call (`call(read_only=True)`), a direct
transaction (the `read` procedure sent as a transaction, answered with a group commit) and
a direct update. Nothing else is in flight, so each figure is the path's own round trip,
not queueing.

The stage table splits each path's mean with the workers' own metrics, scraped before and
after it: the procedure's run (`txstream_te_seconds`), the group commit (steps 1-3 and
the RocksDB write, `txstream_group_commit_seconds`), and the rest: the request's way to
the engine, its wait for its commit to start, and the answer's way back to the client.
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
from txstream.observability.scrape_rates import scrape
from txstream.observability.targets import live_targets


def timed(n: int, op: Callable[[int], object]) -> list[float]:
    out = []
    for k in range(n):
        t0 = time.perf_counter()
        op(k)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def metrics_of(settings: Settings, app: str) -> dict[str, float]:
    """The app's histogram sums and counts from every worker, by sample name and procedure
    (`txstream_te_seconds_sum|update`; '' for series without one)."""
    workers = [t.address for t in live_targets(settings) if t.job == "worker"]
    out: dict[str, float] = {}
    for (name, labels), value in scrape(workers).items():
        tags = dict(labels)
        if tags.get("app") == app and name.endswith(("_sum", "_count")):
            key = f"{name}|{tags.get('procedure', '')}"
            out[key] = out.get(key, 0.0) + value
    return out


def mean_ms(before: dict[str, float], after: dict[str, float], name: str, proc: str) -> float:
    """A histogram's mean over the interval (sum over count), in ms; 0 if it saw none."""
    count = after.get(f"{name}_count|{proc}", 0.0) - before.get(f"{name}_count|{proc}", 0.0)
    total = after.get(f"{name}_sum|{proc}", 0.0) - before.get(f"{name}_sum|{proc}", 0.0)
    return total / count * 1000 if count > 0 else 0.0


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
            before = metrics_of(settings, name)
            lat = sorted(timed(args.ops, op))
            after = metrics_of(settings, name)
            procedure = "update" if "update" in label else "read"
            te = mean_ms(before, after, "txstream_te_seconds", procedure)
            commit = mean_ms(before, after, "txstream_group_commit_seconds", "")
            rows.append((label, statistics.median(lat), lat[int(len(lat) * 0.9)], lat[-1],
                         statistics.mean(lat), te, commit))  # fmt: skip
            print(f"{label}: p50 {rows[-1][1]:.1f} ms", file=sys.stderr)
    print(f"Date: {date.today()}. Machine: {machine_text(machine())}. Command: "
          f"`.venv/bin/python -m bench.oltp_latency {' '.join(sys.argv[1:])}`.")  # fmt: skip
    print("| path | p50 ms | p90 ms | max ms | mean ms | procedure ms | group commit ms | "
          "the rest ms |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, p50, p90, top, mean, te, commit in rows:
        print(f"| {label} | {p50:.1f} | {p90:.1f} | {top:.1f} | {mean:.1f} | {te:.2f} | "
              f"{commit:.1f} | {mean - te - commit:.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
