"""The inventory workload: stock spread over sites, then more reservations than stock, all
at once, promised or through 2PC; and the check that no item was oversold.

Shared by the broker tests (`tests/integration/test_promises.py`, `tests/faults/`) and the
benchmark (`bench/inventory_bench.py`).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from txstream.client import TxClient, fragment
from txstream.kafka.routing import partition_of
from txstream.oltp.messages import Fragment, TxnResult


@dataclass(frozen=True)
class Units:
    item: int
    site: int
    qty: int


W = TypeVar("W")  # a unit of work: what one transaction does


@dataclass(frozen=True)
class Outcome(Generic[W]):
    units: W
    status: TxnResult
    ack_s: float  # promised: until the promise; 2PC: until the result
    final_s: float  # until the final status


def plan(
    items: int, sites: int, stock: int, reservations: int, seed: int = 1
) -> tuple[list[Units], list[Units]]:
    """`stock` units of each item spread over its sites, and `reservations` of 1-3 units
    at random items and sites (the total may be more than the stock, so some must fail)."""
    restocks = [
        Units(i, s, stock // sites + (s <= stock % sites))
        for i in range(1, items + 1)
        for s in range(1, sites + 1)
    ]
    rng = random.Random(seed)
    wanted = [
        Units(rng.randint(1, items), rng.randint(1, sites), rng.randint(1, 3))
        for _ in range(reservations)
    ]
    return [u for u in restocks if u.qty], wanted


def open_sites(client: TxClient, items: int, sites: int, timeout_s: float = 120) -> None:
    """Every (item, site) row at 0, retrying while the workers are still coming up."""
    deadline = time.monotonic() + timeout_s
    for i in range(1, items + 1):
        for s in range(1, sites + 1):
            while True:
                r = client.call([fragment((i, s), "open_site", item=i, site=s)], 10)
                if r.ok:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"could not open item {i} at site {s}: {r}")


def promised(units: Units, procedure: str) -> list[Fragment]:
    u = units
    return [fragment((u.item, u.site), procedure, item=u.item, site=u.site, qty=u.qty)]


def two_phase(units: Units, take: str, claim: str) -> list[Fragment]:
    """A 2PC reservation: the site's row, and the item's count on the item's partition."""
    u = units
    return [
        fragment((u.item, u.site), take, item=u.item, site=u.site, qty=u.qty),
        fragment((u.item,), claim, item=u.item, qty=u.qty),
    ]


def apart(units: Sequence[Units], partitions: int) -> list[Units]:
    """Those whose site row is not on the item's partition: their 2PC has two partitions."""
    return [
        u
        for u in units
        if partition_of((u.item, u.site), partitions) != partition_of((u.item,), partitions)
    ]


def run_promises(
    client: TxClient,
    work: Sequence[Units],
    procedure: str,
    in_flight: int,
    timeout_s: float = 120,
    progress: Callable[[int], None] = lambda done: None,
) -> list[Outcome[Units]]:
    """Promise each, `in_flight` at a time awaiting their final statuses."""
    return run(work, in_flight, timeout_s, progress, lambda u: _promise(client, u, procedure))


def run_two_phase(
    client: TxClient,
    work: Sequence[Units],
    take: str,
    claim: str,
    in_flight: int,
    timeout_s: float = 120,
    progress: Callable[[int], None] = lambda done: None,
) -> list[Outcome[Units]]:
    """Each as one 2PC transaction (its result is final at once)."""

    def start(u: Units) -> tuple[Future[float], Future[TxnResult]]:
        started = time.perf_counter()
        final = client.submit(two_phase(u, take, claim), timeout_s=timeout_s)
        acked: Future[float] = Future()
        final.add_done_callback(lambda _: acked.set_result(time.perf_counter() - started))
        return acked, final

    return run(work, in_flight, timeout_s, progress, start)


def _promise(client: TxClient, u: Units, procedure: str) -> tuple[Future[float], Future[TxnResult]]:
    p = client.promise(promised(u, procedure))
    return p.durable, p.final


def run(
    work: Sequence[W],
    in_flight: int,
    timeout_s: float,
    progress: Callable[[int], None],
    start: Callable[[W], tuple[Future[float], Future[TxnResult]]],
) -> list[Outcome[W]]:
    """`start` each unit of work, `in_flight` at a time awaiting their final statuses;
    `start` returns when it was acknowledged and its final status."""
    slots = threading.Semaphore(in_flight)
    done_at: dict[int, float] = {}
    lock = threading.Lock()
    pending: list[tuple[W, Future[float], Future[TxnResult], float]] = []
    for n, u in enumerate(work):
        if not slots.acquire(timeout=timeout_s):
            raise TimeoutError(f"no final status for {in_flight} transactions in {timeout_s} s")
        started = time.perf_counter()
        acked, final = start(u)

        def finished(_: Future[TxnResult], n: int = n) -> None:
            with lock:
                done_at[n] = time.perf_counter()
            slots.release()

        final.add_done_callback(finished)
        pending.append((u, acked, final, started))
        progress(n + 1)
    out = []
    for n, (u, acked, final, started) in enumerate(pending):
        status = final.result(timeout_s)
        out.append(Outcome(u, status, acked.result(timeout_s), done_at[n] - started))
    return out


def committed(outcomes: Sequence[Outcome[Units]]) -> Counter[int]:
    """Units per item that committed."""
    out: Counter[int] = Counter()
    for o in outcomes:
        if o.status.ok:
            out[o.units.item] += o.units.qty
    return out


def oversold(
    restocks: Sequence[Units], outcomes: Sequence[Outcome[Units]]
) -> dict[int, tuple[int, int]]:
    """item -> (stock, committed reservations), for every item reserved past its stock."""
    stock: Counter[int] = Counter()
    for u in restocks:
        stock[u.item] += u.qty
    return {i: (stock[i], n) for i, n in committed(outcomes).items() if n > stock[i]}


def totals(client: TxClient, table: str, items: int) -> dict[int, int]:
    """Each item's sum of `qty` over its sites, as the engines hold it now."""
    out = {}
    for i in range(1, items + 1):
        r = client.query(table, where=[("item", "=", i)], aggregates=[("sum", "qty")],
                         isolation="read_committed")  # fmt: skip
        if not r.ok:
            raise RuntimeError(f"query of item {i} failed: {r.reason} {r.detail}")
        out[i] = int(r.table_rows()[0][1].get("sum_qty") or 0)
    return out
