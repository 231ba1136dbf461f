"""Split commit on the real broker: the inventory app on 4 partitions and 2 workers, its
reservations promised (BASIC) against `sum(qty) >= 0 group by item`, with twice as much
demand as stock, all in flight at once.

Checked: every promise is acknowledged and ends with one final status, to the client and
on the statuses topic; no item is oversold; the engines' stock per item is the restocked
units less exactly the committed reservations (so each committed promise landed once and
no aborted one landed); some reservations were aborted by the constraint, naming it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from inventory import workload
from tests.conftest import KafkaEnv
from tests.integration.inventory_cluster import InventoryCluster

pytestmark = pytest.mark.integration

ITEMS, SITES, STOCK = 3, 8, 30


@pytest.fixture
def cluster(kafka: KafkaEnv, tmp_path: Path) -> Iterator[InventoryCluster]:
    c = InventoryCluster(kafka.settings.model_copy(update={"home": tmp_path / "home"}), tmp_path)
    c.start("coordinator")
    c.start("worker", 0)
    c.start("worker", 1)
    try:
        yield c
    finally:
        c.stop_all()


def settled(
    cluster: InventoryCluster, want: dict[int, int], timeout_s: float = 60
) -> dict[int, int]:
    """The engines' totals once every decision has landed (they land after the status)."""
    deadline = time.monotonic() + timeout_s
    with cluster.client() as client:
        while True:
            now = workload.totals(client, "stock", ITEMS)
            if now == want or time.monotonic() > deadline:
                return now
            time.sleep(0.2)


def test_promised_reservations_never_oversell(cluster: InventoryCluster) -> None:
    restocks, wanted = workload.plan(ITEMS, SITES, STOCK, reservations=90, seed=3)
    assert sum(u.qty for u in wanted) > 1.5 * ITEMS * STOCK  # more demand than stock
    with cluster.client() as client:
        workload.open_sites(client, ITEMS, SITES)
        stocked = workload.run_promises(client, restocks, "restock", in_flight=32)
        assert all(o.status.ok for o in stocked), [o.status for o in stocked if not o.status.ok]
        outcomes = workload.run_promises(client, wanted, "reserve", in_flight=64)

    assert all(o.ack_s <= o.final_s for o in outcomes)
    assert workload.oversold(restocks, outcomes) == {}
    reasons = Counter(o.status.reason for o in outcomes if not o.status.ok)
    assert set(reasons) == {"aggregate_constraint"} and reasons["aggregate_constraint"] > 0
    aborted = next(o.status for o in outcomes if not o.status.ok)
    assert "'sum(qty) >= 0 group by item' on table 'stock'" in aborted.detail

    reserved = workload.committed(outcomes)
    want = {i: STOCK - reserved[i] for i in range(1, ITEMS + 1)}
    assert all(v >= 0 for v in want.values())
    assert settled(cluster, want) == want

    published = cluster.statuses()
    mine = {o.status.request_id: o.status for o in [*stocked, *outcomes]}
    assert Counter(s.request_id for s in published) == Counter(mine.keys()), "one status each"
    assert all(mine[s.request_id] == s for s in published)
