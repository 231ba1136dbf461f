"""Split commit on the real broker: the inventory app on 4 partitions and 2 workers, its
reservations promised (BASIC) against `sum(qty) >= 0 group by item`, with twice as much
demand as stock, all in flight at once.

Checked: every promise is acknowledged and ends with one final status, to the client and
on the statuses topic (a BASE one too, committed on its partition with no SERIALIZE); no
item is oversold; the engines' stock per item is the restocked units less exactly the
committed reservations (so each committed promise landed once and no aborted one landed);
some reservations were aborted by the constraint, naming it; and `txstream verify` replays
the run equal, and names a changelog row altered after it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from inventory import workload
from inventory.dataflow import from_params
from tests.support.inventory_cluster import InventoryCluster
from tests.support.kafka_env import KafkaEnv
from txstream import Key, Record
from txstream.kafka.clients import transactional_producer_config
from txstream.recovery.changelog import partition_tables
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing.verify import verify

pytestmark = pytest.mark.kafka

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
        # BASE: no SERIALIZE; its partition's commit is its final status
        base = client.promise(workload.promised(workload.Units(1, 1, 3), "acid_restock"), "BASE")
        assert base.promised() > 0 and base.status().ok and base.status().values() == [3]

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
    mine[base.request_id] = base.status()
    assert Counter(s.request_id for s in published) == Counter(mine.keys()), "one status each"
    assert all(mine[s.request_id] == s for s in published)

    # the run replays equal: every promise, run and decision, as each engine took them
    cluster.stop_all()
    app = from_params({"name": cluster.name})
    verdict = verify(cluster.settings, app, cluster.partitions)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
    assert any("coordinator decided right" in u for u in verdict.unseen)
    assert verdict.batches >= len(outcomes) + len(stocked) + ITEMS * SITES + 1
    # a stock row altered in the changelog is named, with the record that last wrote it
    p, key, row = altered_stock_row(cluster)
    found = verify(cluster.settings, app, cluster.partitions).divergence
    assert found is not None and (found.partition, found.table, found.key) == (p, "stock", key)
    assert found.committed == {**row, "qty": row["qty"] + 1} and found.reference == row
    assert found.oltp and found.last_write is not None
    assert found.last_write[0] in (cluster.topics.decisions, cluster.topics.requests)
    assert "the record at offset" in found.text()


def altered_stock_row(cluster: InventoryCluster) -> tuple[int, Key, Record]:
    """One committed stock row with one more unit, written to the changelog as an engine
    would: (its partition, key, the row as it was)."""
    codec = StateCodec(from_params({"name": cluster.name}).dataflow(),
                       SchemaRegistry(cluster.settings.schema_dir))  # fmt: skip
    stock = partition_tables(cluster.settings, codec, cluster.topics.changelog, 1)["stock"]
    key, row = min(stock.items())
    producer = Producer(transactional_producer_config(cluster.settings, f"alter-{cluster.name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    more = codec.encode_row("stock", {**row, "qty": row["qty"] + 1})
    producer.produce(cluster.topics.changelog, more, codec.key("stock", key), partition=1)
    producer.commit_transaction(30)
    return 1, key, row
