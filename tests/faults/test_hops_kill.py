"""A repartitioned edge with its workers SIGKILLed at seeded random moments: a part sent
twice or lost, or a tally applied twice after a restart, changes the committed counts,
which must equal the serial reference; and `txstream verify` replays the run equal."""

from __future__ import annotations

from pathlib import Path

import pytest

from orders.sales import from_params, reference
from orders.sales_run import SalesRun, by_item, sales_events
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import Killer, kill_leftovers
from tests.support.scale import seeds
from txstream.kafka.routing import partition_of
from txstream.testing.verify import verify

WORKERS = 2
KILLS = 3  # per worker: six in a run
EVENTS = 6_000
SLICE = EVENTS // 40


@pytest.mark.slow  # two workers killed six times: runs in make faults
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds([41], [41, 42, 43]))
def test_sigkilled_workers_give_the_serial_reference(
    kafka: KafkaEnv, tmp_path: Path, seed: int
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    events = sales_events(seed, EVENTS)
    # produced in slices of SLICE events, batches of 2: no batch straddles a slice
    batches = [events[i : i + 2] for i in range(0, EVENTS, 2)]
    customers, items, totals = reference(batches, lambda c: partition_of((c,), 4))
    cluster = SalesRun(settings, partitions=4, workers=WORKERS)
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
        for start in range(0, EVENTS, SLICE):
            cluster.produce(events[start : start + SLICE], batch_size=2)
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
    assert by_item(cluster.item_totals()) == by_item(totals)  # in one serial order
    verdict = verify(settings, from_params({"name": cluster.app.name}), 4)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
