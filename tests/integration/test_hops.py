"""A repartitioned edge on the real broker: the sales app's `tally` runs on the engines
owning the items, fed through its own topic, and both count tables and every item's running
totals equal the serial reference (the ordered edge takes parts in batch-id order); each
part is on its item's owner, and each sender's parts are in batch order; `txstream verify`
replays the run equal, ordered or not, and names a count altered afterwards."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from orders.sales import from_params, reference
from orders.sales_run import SalesRun, by_item, sales_events
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.sequencer_driver import (
    SequencerProcess,
    produce_events,
    unique,
    write_config,
)
from txstream.kafka.clients import transactional_producer_config
from txstream.kafka.routing import partition_of
from txstream.recovery.changelog import partition_tables
from txstream.testing.verify import verify

PARTITIONS = 4


@pytest.mark.timeout(300)
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_repartitioned_dataflow_equals_the_serial_reference(
    kafka: KafkaEnv, tmp_path: Path, ordered: bool
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    events = sales_events(seed=5, n=600)
    batches = [events[i : i + 4] for i in range(0, len(events), 4)]
    customers, items, totals = reference(batches, lambda c: partition_of((c,), PARTITIONS))
    cluster = SalesRun(settings, PARTITIONS, workers=2, ordered=ordered)
    want = {"customer_sales": customers, "item_sales": items}
    try:
        cluster.start()
        cluster.produce(events, batch_size=4)
        if ordered:  # the commit notices say every part up to the last ran
            cluster.wait_committed(200)
            assert cluster.counts() == want
        else:
            cluster.wait_for(want, 200, cluster.alive)
    finally:
        cluster.stop()
        kill_leftovers(settings.home)
    if ordered:
        assert by_item(cluster.item_totals()) == by_item(totals)  # in one serial order
    app = from_params({"name": cluster.app.name, "ordered": ordered})
    verdict = verify(settings, app, PARTITIONS)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
    assert verdict.batches > len(batches), "border batches and hop parts, all replayed"
    # an item's count, which only the hop's parts write, altered in its changelog
    item = min(items)
    q = partition_of((item,), PARTITIONS)
    topics, codec = cluster.topics, cluster.state_codec
    row = partition_tables(settings, codec, topics.changelog, q)["item_sales"][(item,)]
    altered = {**row, "units": row["units"] + 1}
    producer = Producer(transactional_producer_config(settings, f"alter-{app.name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topics.changelog, codec.encode_row("item_sales", altered),
                     codec.key("item_sales", (item,)), partition=q)  # fmt: skip
    producer.commit_transaction(30)
    found = verify(settings, app, PARTITIONS).divergence
    assert found is not None
    assert (found.partition, found.table, found.key) == (q, "item_sales", (item,))
    assert found.committed == altered and found.reference == row
    assert found.last_write is not None and found.last_write[0] == topics.hop("tally")
    parts = cluster.hop_parts()
    assert sum(len(t) for log in parts for _, _, t in log) == sum(n for n, _ in items.values())
    for q, log in enumerate(parts):
        assert all(partition_of((t["item"],), PARTITIONS) == q for _, _, ts in log for t in ts)
        for sender in {s for s, _, _ in log}:
            ids = [b for s, b, _ in log if s == sender]
            assert ids == sorted(set(ids)), f"partition {q}, sender {sender}: {ids}"
    assert {s for log in parts for s, _, _ in log} == set(range(PARTITIONS))


@pytest.mark.timeout(300)
def test_an_ordered_edge_fed_through_the_sequencer_runs_to_the_end(
    kafka: KafkaEnv, tmp_path: Path, new_topic: Callable[..., str]
) -> None:
    """No client marks progress here: the sequencer's `progress = true` route does, so the
    parts of the last batches, which some engines had no part of, run too."""
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    events = sales_events(seed=8, n=300)
    batches = [events[i : i + 3] for i in range(0, len(events), 3)]
    customers, items, totals = reference(batches, lambda c: partition_of((c,), PARTITIONS))
    raw = new_topic("raw-orders")
    produce_events(settings, raw, [{**e, "batch_id": 1 + i // 3} for i, e in enumerate(events)])
    cluster = SalesRun(settings, PARTITIONS, workers=1)
    route = {"topic": raw, "app": cluster.app.name, "stream": "sales_events",
             "schema": "orders.Event", "batch_id_field": "batch_id", "key_field": "customer",
             "seal_after_ms": 100, "progress": True}  # fmt: skip
    config = write_config(tmp_path / "seq.toml", unique("seq"), [route])
    sequencer = SequencerProcess(settings, config, tmp_path / "sequencer.log")
    try:
        cluster.start()
        cluster.wait_committed(200, last=len(batches))
        assert cluster.counts() == {"customer_sales": customers, "item_sales": items}
    finally:
        sequencer.kill()
        cluster.stop()
        kill_leftovers(settings.home)
    assert by_item(cluster.item_totals()) == by_item(totals)
