"""Promised reservations while the coordinator and the workers are SIGKILLed.

The inventory app on 4 partitions and 2 workers; reservations (twice the stock) are
promised while, at evenly spaced points of the run, the coordinator or a worker is killed
and started again. Every promise must still end with exactly one final status (to the
client and on the statuses topic), no item may be oversold, and the engines' stock must
be the restocked units less exactly the committed reservations.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from inventory import workload
from tests.support.inventory_cluster import InventoryCluster, KillSchedule
from tests.support.kafka_env import KafkaEnv
from tests.support.scale import seeds

ITEMS, SITES, STOCK = 4, 8, 60
RESERVATIONS = 600  # in make faults only, so at its full length
KILLS = 6
STATUS_S = 180.0  # a promise's final status waits out a restart (a rebalance, a takeover)


@pytest.mark.slow  # a coordinator and workers killed (~30 s): make faults
@pytest.mark.parametrize("seed", seeds([5, 6, 7], [5, 6, 7]))
def test_every_promise_ends_once_and_nothing_is_oversold_across_kills(
    kafka: KafkaEnv, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    cluster = InventoryCluster(
        kafka.settings.model_copy(update={"home": tmp_path / "home"}), tmp_path
    )
    targets = ["coordinator", *(rng.choice(["worker-0", "worker-1"]) for _ in range(KILLS - 1))]
    rng.shuffle(targets)
    kills = KillSchedule(cluster, targets, RESERVATIONS)
    try:
        restocks, wanted = workload.plan(ITEMS, SITES, STOCK, RESERVATIONS, seed)
        with cluster.client(timeout_s=STATUS_S) as client:
            workload.open_sites(client, ITEMS, SITES)
            stocked = workload.run_promises(client, restocks, "restock", 32, STATUS_S)
            assert all(o.status.ok for o in stocked)
            started = time.monotonic()
            outcomes = workload.run_promises(
                client, wanted, "reserve", 16, STATUS_S, progress=kills
            )
            took = time.monotonic() - started
        assert len(kills.killed) == KILLS, kills.killed
        assert workload.oversold(restocks, outcomes) == {}
        reasons = Counter(o.status.reason for o in outcomes if not o.status.ok)
        assert set(reasons) <= {"aggregate_constraint"} and reasons, reasons
        reserved = workload.committed(outcomes)
        want = {i: STOCK - reserved[i] for i in range(1, ITEMS + 1)}
        deadline = time.monotonic() + 90
        with cluster.client() as client:
            while (now := workload.totals(client, "stock", ITEMS)) != want:
                assert time.monotonic() < deadline, f"stock {now}, committed leave {want}"
                time.sleep(0.3)
        published = Counter(s.request_id for s in cluster.statuses())
        mine = {o.status.request_id for o in [*stocked, *outcomes]}
        assert set(published) == mine and set(published.values()) == {1}
        print(f"seed {seed}: {len(outcomes)} promises, kills {kills.killed}, {took:.1f} s, "
              f"aborted {sum(reasons.values())}")  # fmt: skip
    finally:
        cluster.stop_all()
