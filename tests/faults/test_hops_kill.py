"""A repartitioned edge with its workers SIGKILLed at seeded random moments: a part sent
twice or lost, or a tally applied twice after a restart, changes the committed counts,
which must equal the serial reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from orders.sales import reference
from tests.conftest import KafkaEnv
from tests.faults.killer import Killer, kill_leftovers
from tests.faults.scale import LONG, seeds
from tests.integration.sales_cluster import SalesCluster, sales_events

WORKERS = 2
KILLS = 3  # per worker: six in a run
EVENTS = 6_000


@pytest.mark.skipif(not LONG, reason="two workers killed six times: runs in make faults")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds([41], [41, 42, 43]))
def test_sigkilled_workers_give_the_serial_reference(
    kafka: KafkaEnv, tmp_path: Path, seed: int
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    events = sales_events(seed, EVENTS)
    customers, items = reference(events)
    cluster = SalesCluster(settings, partitions=4, workers=WORKERS)
    killers = [
        Killer(
            settings.run_dir / f"worker-{i}.pid",
            "worker run",
            kills=KILLS,
            seed=seed + i,
            log=settings.home / "log" / f"worker-{i}.log",
            ready="resuming",
        )
        for i in range(WORKERS)
    ]
    try:
        cluster.start()
        for k in killers:
            k.start()
        # in slices, while the killers work, so that the kills land while batches flow
        for start in range(0, EVENTS, EVENTS // 40):
            cluster.produce(events[start : start + EVENTS // 40], batch_size=2)
            for k in killers:
                k.join(0.25)
        for k in killers:
            k.join(600)
        cluster.wait_for({"customer_sales": customers, "item_sales": items}, 400, cluster.alive)
    finally:
        for k in killers:
            k.done.set()
        cluster.stop()
        kill_leftovers(settings.home)
    assert sum(len(k.killed) for k in killers) == WORKERS * KILLS
