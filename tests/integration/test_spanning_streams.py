"""Two spanning streams on the same accounts, on the real broker: transfers and refunds
(`bank.refunds`) sent interleaved by one `BatchProducer` (one id sequence, each batch only
to the partitions it touches, progress marks on both streams), 4 partitions, 2 workers, one
of them SIGKILLed and started again mid-run. Every batch commits (nothing waits forever
across engines), the balances and every outcome equal running the batches alone in id
order (computed here), and `txstream verify` replays the run to the same state.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from bank.refunds import build_app
from orders.commits import CommitWatch
from tests.simulation.test_spanning_streams import serial
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.service_process import ServiceProcess
from tests.support.simulation.spanning import random_transfers
from txstream import BatchProducer
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Record
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing.verify import verify

pytestmark = pytest.mark.kafka

PARTITIONS, WORKERS, ACCOUNTS, BATCHES, K = 4, 2, 12, 300, 2


@pytest.mark.timeout(300)
def test_transfers_and_refunds_run_in_one_order_across_engines(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    settings = kafka.settings.model_copy(
        update={"home": tmp_path / "home", "kafka_partitions": PARTITIONS}
    )
    rng = random.Random(3)
    app = build_app(f"refunds-{uuid.uuid4().hex[:8]}")
    topics = AppTopics(app.name)
    opening = {a: rng.randint(0, 100) for a in range(ACCOUNTS)}
    moves = random_transfers(rng, ACCOUNTS, BATCHES * K)
    batches = [(rng.choice(["transfers", "refunds"]), moves[i : i + K])
               for i in range(0, len(moves), K)]  # fmt: skip
    argv = ["worker", "run", "--app", "bank.refunds:from_params", "--params",
            json.dumps({"name": app.name}), "--no-metrics"]  # fmt: skip
    workers = [ServiceProcess(settings, [*argv, "--instance-id", str(i)],
                              tmp_path / f"worker-{i}.log") for i in range(WORKERS)]  # fmt: skip
    watch = CommitWatch(settings, topics.commits, PARTITIONS)
    try:
        with BatchProducer(app, settings) as producer:
            with producer.transaction():
                opened = [producer.send("opens", [{"account": a, "balance": b}])
                          for a, b in opening.items()]  # fmt: skip
            alive = lambda: all(w.alive() for w in workers)  # noqa: E731
            # the openings commit before any move: their order is not defined otherwise
            last_opened = [0] * PARTITIONS
            for a, batch_id in zip(opening, opened, strict=True):
                p = partition_of((a,), PARTITIONS)
                last_opened[p] = max(last_opened[p], batch_id)
            watch.wait({"opens": last_opened}, 120, alive)
            half = len(batches) // 2
            for start in range(0, len(batches), 25):
                with producer.transaction():
                    for stream, rows in batches[start : start + 25]:
                        producer.send(stream, rows)
                if start <= half < start + 25:
                    workers[1].kill()
                    workers[1] = ServiceProcess(settings, [*argv, "--instance-id", "1"],
                                                tmp_path / "worker-1.log")  # fmt: skip
        last = len(batches)
        watch.wait({"transfers": [last] * PARTITIONS, "refunds": [last] * PARTITIONS}, 240,
                   alive)  # fmt: skip
    finally:
        watch.close()
        for w in workers:
            w.kill()
        kill_leftovers(settings.home)

    balances, outcomes = serial(opening, batches)
    registry = SchemaRegistry(settings.schema_dir)
    codec = BatchCodec(registry.get("bank.TransferOutcome"))
    emitted: list[tuple[str, int, str]] = []
    for stream in ("transfer_outcomes", "refund_outcomes"):
        for p in range(PARTITIONS):
            for msg in read_to_committed_end(settings, topics.stream(stream), p):
                t: Record
                for t in codec.decode(msg.value() or b"").tuples:
                    emitted.append((stream.split("_")[0] + "s", t["seq"], t["outcome"]))
    assert len(emitted) == len(moves), "each outcome once"
    assert {(s, q): o for s, q, o in emitted} == outcomes
    tables = committed_tables(settings, StateCodec(app.dataflow(), registry), topics.changelog,
                              PARTITIONS)  # fmt: skip
    assert {k[0]: r["balance"] for k, r in tables["accounts"].items()} == balances
    verdict = verify(settings, app, PARTITIONS)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
    TopicAdmin(settings).delete_topics(
        t for t in TopicAdmin(settings).list_topics() if t.startswith(f"{app.name}.")
    )
