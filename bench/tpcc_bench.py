"""TPC-C on txstream and on PostgreSQL, in the same run, with the consistency conditions
checked on both afterwards.

    .venv/bin/python -m bench.tpcc_bench --warehouses 4 --txns 4000

txstream: the `tpcc` app (`apps/tpcc`), each warehouse's rows on the partition its key
`(w,)` maps to, on `--workers` workers over `--partitions` partitions with the coordinator,
on the running stack's broker (`make up`); `--in-flight` transactions outstanding from one
Python client. A New-Order with a remote supply line and a Payment by a remote customer
are 2PC across partitions. PostgreSQL: a private cluster (as the YCSB and Leaderboard
peers: fsync off, synchronous commit on), each transaction one stored function in its own
SERIALIZABLE transaction from `--clients` connections, retried on a serialization failure
(up to 50 times, with jittered exponential backoff; one that never gets through counts as
failed).

The specification's mix (New-Order 45%, Payment 43%, Order-Status, Delivery and
Stock-Level 4% each), 5-15 lines per order with 1% from a remote warehouse, 1% of
New-Orders rolled back by an unused item, 15% of Payments by a remote customer, NURand
customer and item ids; both systems run the same list. tpmC here is New-Orders committed
per minute of the run. Scaled down and simplified, stated so the figure is not taken for
an audited one: `--items` (100,000 in the specification) and `--customers` per district
(3,000) are smaller, the database starts with no orders, customers are chosen by id only
(not 60% by last name), and there are no terminals, keying or think times: the clients
send as fast as the system answers. Afterwards both databases must meet TPC-C's
consistency conditions 1-4 (3.3.2.1-3.3.2.4).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import psycopg

from bench import tpcc_pg
from bench.leaderboard_peers.postgres import private_cluster, serve
from bench.machine_info import machine, machine_text
from bench.ycsb_bench import txstream_app
from tpcc.dataflow import DISTRICTS
from txstream.client import TxClient, fragment
from txstream.config import Settings
from txstream.oltp.messages import Fragment, TxnResult

MIX = (("new_order", 45), ("payment", 43), ("order_status", 4), ("delivery", 4),
       ("stock_level", 4))  # fmt: skip
Txn = tuple[str, dict[str, Any]]
RETRIES = 50  # PostgreSQL: serialization failures retried, with jittered backoff


def nurand(rng: random.Random, a: int, x: int, y: int) -> int:
    """TPC-C's non-uniform random over x..y (2.1.6), its constant C fixed at 42."""
    return (((rng.randint(0, a) | rng.randint(x, y)) + 42) % (y - x + 1)) + x


def plan(warehouses: int, items: int, customers: int, count: int, seed: int) -> list[Txn]:
    rng = random.Random(seed)
    kinds = [k for k, share in MIX for _ in range(share)]

    def other(w: int) -> int:
        return rng.choice([v for v in range(1, warehouses + 1) if v != w] or [w])

    out: list[Txn] = []
    for _ in range(count):
        kind, w, d = rng.choice(kinds), rng.randint(1, warehouses), rng.randint(1, DISTRICTS)
        c = nurand(rng, 63, 1, customers)
        if kind == "new_order":
            lines = [{"i": nurand(rng, 255, 1, items),
                      "supply_w": other(w) if rng.random() < 0.01 else w,
                      "qty": rng.randint(1, 10)} for _ in range(rng.randint(5, 15))]  # fmt: skip
            if rng.random() < 0.01:
                lines[-1]["i"] = items + 1  # unused: the order rolls back
            out.append((kind, {"w": w, "d": d, "c": c, "lines": lines}))
        elif kind == "payment":
            remote = rng.random() < 0.15
            cw, cd = (other(w), rng.randint(1, DISTRICTS)) if remote else (w, d)
            amount = rng.randint(100, 500_000)
            out.append((kind, {"w": w, "d": d, "cw": cw, "cd": cd, "c": c, "amount": amount}))
        elif kind == "order_status":
            out.append((kind, {"w": w, "d": d, "c": c}))
        elif kind == "delivery":
            out.append((kind, {"w": w, "carrier": rng.randint(1, 10)}))
        else:
            out.append((kind, {"w": w, "d": d, "threshold": rng.randint(10, 20)}))
    return out


def fragments(kind: str, p: dict[str, Any]) -> list[Fragment]:
    """One TPC-C transaction as the app's fragments, each keyed by its warehouse."""
    w = p["w"]
    if kind == "new_order":
        out = [fragment((w,), "new_order", w=w, d=p["d"], c=p["c"], lines=p["lines"])]
        remote: dict[int, list[dict[str, int]]] = {}
        for line in p["lines"]:
            if line["supply_w"] != w:
                remote.setdefault(line["supply_w"], []).append(line)
        return out + [fragment((sw,), "remote_stock", w=sw, lines=ls) for sw, ls in remote.items()]
    if kind == "payment":
        return [fragment((w,), "pay_home", w=w, d=p["d"], amount=p["amount"]),
                fragment((p["cw"],), "pay_customer", w=p["cw"], d=p["cd"], c=p["c"],
                         amount=p["amount"])]  # fmt: skip
    if kind == "delivery":
        return [fragment((w,), "delivery", w=w, carrier=p["carrier"])]
    if kind == "order_status":
        return [fragment((w,), "order_status", w=w, d=p["d"], c=p["c"])]
    return [fragment((w,), "stock_level", w=w, d=p["d"], threshold=p["threshold"])]


@dataclass
class Result:
    system: str
    seconds: float = 0.0
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    rolled_back: int = 0  # New-Orders with an unused item, as the specification wants
    failed: Counter[str] = field(default_factory=Counter)  # other aborts, by reason
    retries: int = 0

    def done(self, kind: str, ms: float) -> None:
        self.latencies_ms.setdefault(kind, []).append(ms)

    def tpmc(self) -> float:
        return len(self.latencies_ms.get("new_order", [])) / self.seconds * 60

    def rows(self) -> list[str]:
        out = []
        for kind, _ in MIX:
            lat = sorted(self.latencies_ms.get(kind, []))
            if not lat:
                continue
            p50, p99 = lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            out.append(f"| {self.system} | {kind} | {len(lat):,} | {p50:.1f} | {p99:.1f} |")
        return out


def txstream_load(client: TxClient, warehouses: int, items: int, customers: int) -> None:
    for w in range(1, warehouses + 1):
        calls = [[fragment((w,), "load_warehouse", w=w, items=items)]]
        calls += [[fragment((w,), "load_customers", w=w, d=d, customers=customers)]
                  for d in range(1, DISTRICTS + 1)]  # fmt: skip
        for frags in calls:
            r = client.call(frags, 120)
            if not r.ok:
                raise RuntimeError(f"loading warehouse {w}: {r.reason} {r.detail}")


def txstream_run(client: TxClient, txns: list[Txn], in_flight: int) -> Result:
    result = Result("txstream")
    pending: dict[Future[TxnResult], tuple[str, float]] = {}
    done_at: dict[Future[TxnResult], float] = {}
    started = time.perf_counter()
    sent = 0
    while sent < len(txns) or pending:
        while sent < len(txns) and len(pending) < in_flight:
            kind, p = txns[sent]
            f = client.submit(fragments(kind, p), timeout_s=60)
            f.add_done_callback(lambda f: done_at.__setitem__(f, time.perf_counter()))
            pending[f] = (kind, time.perf_counter())
            sent += 1
        complete, _ = wait(pending, 90, FIRST_COMPLETED)
        if not complete:
            raise RuntimeError(f"no answer in 90 s with {len(pending)} transactions outstanding")
        for done in complete:
            kind, t0 = pending.pop(done)
            r = done.result()
            if r.ok:
                result.done(kind, (done_at.get(done, time.perf_counter()) - t0) * 1000)
            elif r.reason == "unused_item":
                result.rolled_back += 1
            else:
                result.failed[r.reason] += 1
    result.seconds = time.perf_counter() - started
    return result


def txstream_violations(client: TxClient, warehouses: int) -> list[str]:
    """TPC-C's consistency conditions 1-4, from queries across every partition."""

    def one(table: str, where: list[tuple[str, str, int]], aggs: list[tuple[str, str]]) -> Any:
        r = client.query(table, where=where, aggregates=aggs, isolation="snapshot",
                         timeout_s=60)  # fmt: skip
        if not r.ok:
            raise RuntimeError(f"query of {table} failed: {r.reason} {r.detail}")
        return r.table_rows()[0][1]

    broken: set[str] = set()
    for w in range(1, warehouses + 1):
        ytd = one("warehouse", [("w_id", "=", w)], [("sum", "ytd")])["sum_ytd"]
        if ytd != one("district", [("w_id", "=", w)], [("sum", "ytd")])["sum_ytd"]:
            broken.add("W_YTD = sum(D_YTD)")
        for d in range(1, DISTRICTS + 1):
            at = [("w_id", "=", w), ("d_id", "=", d)]
            nxt = one("district", at, [("max", "next_o_id")])["max_next_o_id"]
            orders = one("orders", at, [("max", "o_id"), ("sum", "ol_cnt")])
            new = one("new_order", at, [("max", "o_id"), ("min", "o_id"), ("count", "")])
            lines = one("order_line", at, [("count", "")])["count"]
            if nxt - 1 != (orders["max_o_id"] or 0) or nxt - 1 < (new["max_o_id"] or 0):
                broken.add("D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)")
            if new["count"] and new["max_o_id"] - new["min_o_id"] + 1 != new["count"]:
                broken.add("max(NO_O_ID) - min(NO_O_ID) + 1 = count(NO)")
            if (orders["sum_ol_cnt"] or 0) != lines:
                broken.add("sum(O_OL_CNT) = count(OL)")
    return sorted(broken)


def pg_run(dsn: str, txns: list[Txn], clients: int) -> Result:
    result = Result("PostgreSQL")
    lock = threading.Lock()
    backoff = random.Random()

    def each(conn: psycopg.Connection[Any], txn: Txn) -> None:
        t0 = time.perf_counter()
        ok, retries = None, 0
        while ok is None and retries < RETRIES:
            try:
                ok = tpcc_pg.run(conn, *txn)
            except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected):
                conn.rollback()
                retries += 1
                time.sleep(backoff.uniform(0, min(0.05, 0.001 * 2**retries)))
        ms = (time.perf_counter() - t0) * 1000
        with lock:
            result.retries += retries
            if ok:
                result.done(txn[0], ms)
            elif ok is False:
                result.rolled_back += 1
            else:
                result.failed["retries"] += 1

    result.seconds = serve(dsn, txns, clients, each)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouses", type=int, default=4)
    p.add_argument("--items", type=int, default=2000, help="the specification has 100,000")
    p.add_argument("--customers", type=int, default=300, help="per district (spec: 3,000)")
    p.add_argument("--txns", type=int, default=4000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--in-flight", type=int, default=64, help="txstream: outstanding")
    p.add_argument("--clients", type=int, default=8, help="PostgreSQL: connections")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--direct-via",
        choices=["kafka", "endpoint"],
        default="kafka",
        help="how txstream's single-partition transactions reach their engine: its Kafka "
        "input, or the owning worker's endpoint over HTTP",
    )
    args = p.parse_args()
    txns = plan(args.warehouses, args.items, args.customers, args.txns, args.seed)
    settings = Settings()
    name = f"tpcc-{uuid.uuid4().hex[:8]}"
    problems: list[str] = []
    print(f"txstream: {name}, {args.workers} workers, {args.partitions} partitions, "
          f"{args.warehouses} warehouses", file=sys.stderr)  # fmt: skip
    factory = "tpcc.dataflow:from_params"
    with (
        txstream_app(settings, name, args.partitions, args.workers, factory),
        TxClient(name, settings, timeout_s=120, direct_via=args.direct_via) as c,
    ):
        txstream_load(c, args.warehouses, args.items, args.customers)
        ours = txstream_run(c, txns, args.in_flight)
        problems += [f"txstream breaks {v}" for v in txstream_violations(c, args.warehouses)]
    with private_cluster() as cluster:
        print(f"PostgreSQL {cluster.version}, {args.clients} connections", file=sys.stderr)
        tpcc_pg.load(cluster.dsn, args.warehouses, args.items, args.customers)
        theirs = pg_run(cluster.dsn, txns, args.clients)
        problems += [f"PostgreSQL breaks {v}" for v in tpcc_pg.violations(cluster.dsn)]
        version = cluster.version
    for r in (ours, theirs):
        if r.failed:
            problems.append(f"{r.system}: transactions failed {dict(r.failed)}")
    print(f"Date: {date.today()}. Machine: {machine_text(machine())}. PostgreSQL {version}. "
          f"Command: `.venv/bin/python -m bench.tpcc_bench {' '.join(sys.argv[1:])}`.")  # fmt: skip
    print("| system | tpmC (New-Orders/min) | txns/s | rolled back | retries | checks |")
    print("|---|---|---|---|---|---|")
    for r in (ours, theirs):
        n = sum(map(len, r.latencies_ms.values()))
        ok = "BROKEN" if any(x.startswith(f"{r.system} breaks") for x in problems) else "met"
        print(f"| {r.system} | {r.tpmc():,.0f} | {n / r.seconds:,.0f} | {r.rolled_back} | "
              f"{r.retries} | {ok} |")  # fmt: skip
    print(f"txstream / PostgreSQL = {ours.tpmc() / theirs.tpmc():.2f}x tpmC")
    print("| system | transaction | committed | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for r in (ours, theirs):
        print("\n".join(r.rows()))
    for problem in problems:
        print(f"CHECK FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
