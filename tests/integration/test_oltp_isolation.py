"""OLTP transactions interleaved with a dataflow see serializable state (real broker).

Payroll batches run as a nested transaction (`withhold` from the employer, then `pay` the
employees) while 2PC transfers move money between employees of different partitions and
snapshot queries total every account, all at once. Money is only ever in flight inside a
nested transaction or a prepared 2PC transaction, so any query that observed one half-done
would see the wrong total. Every snapshot must show the total unchanged and no negative
balance; the end state must match the batches and transfers that committed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.bank_cluster import BankCluster
from tests.support.kafka_env import KafkaEnv
from tests.support.scale import scaled

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

EMPLOYEES = 4
# The employer's 100 pays PAY per batch until it has none left; the last 5 batches abort on
# balance >= 0. `make faults` runs twice as many, smaller.
PAY = scaled(10, 5)
BATCHES = 100 // PAY + 5
TRANSFERS = scaled(26, 50)


@pytest.fixture
def cluster(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BankCluster]:
    c = BankCluster(kafka.settings, tmp_path_factory.mktemp("isolation"))
    c.worker()
    c.coordinator()
    try:
        yield c
    finally:
        c.stop_all()


def test_snapshots_never_see_half_done_transactions(cluster: BankCluster) -> None:
    employers = [cluster.account_on(p) for p in range(cluster.partitions)]
    staff = [[cluster.account_on(p) for _ in range(EMPLOYEES)] for p in range(cluster.partitions)]
    everyone = employers + [w for ws in staff for w in ws]
    expected_total = 100 * len(everyone)
    with cluster.client(timeout_s=30) as client:
        cluster.open(client, *everyone)
        snapshots: list[dict[str, int]] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                snapshots.append(cluster.totals(client))

        watcher = threading.Thread(target=watch)
        watcher.start()
        rng = random.Random(7)
        committed = 0
        try:
            for batch_id in range(1, BATCHES + 1):
                for p in range(cluster.partitions):
                    lines = [
                        (employers[p], w, PAY // EMPLOYEES + (i < PAY % EMPLOYEES))
                        for i, w in enumerate(staff[p])
                    ]
                    cluster.payroll(p, batch_id, lines)
                for _ in range(TRANSFERS // BATCHES):
                    a, b = rng.choice(staff[0]), rng.choice(staff[1])
                    a, b = (a, b) if rng.random() < 0.5 else (b, a)
                    committed += cluster.transfer(client, a, b, rng.randint(1, 20)).ok
        finally:
            stop.set()
            watcher.join(60)
        # payroll drains each employer to 0 once its batches have run (bounded wait)
        deadline = time.monotonic() + 120
        while any(cluster.balance(client, e) for e in employers):
            assert time.monotonic() < deadline, "the payroll batches did not all run"
        end = cluster.totals(client)
    assert committed > 0, "no transfer committed: the test exercised no 2PC"
    assert len(snapshots) > 20, f"only {len(snapshots)} snapshots ran alongside"
    bad = [s for s in snapshots if s["sum_balance"] != expected_total or s["min_balance"] < 0]
    assert not bad, (
        f"{len(bad)} of {len(snapshots)} snapshots saw a half-done transaction: {bad[:3]}"
    )
    assert end == {"sum_balance": expected_total, "min_balance": 0, "count": len(everyone)}
