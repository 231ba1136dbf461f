"""A spanning procedure below PL3 on the real broker: reads as of each epoch's start.

TSpoon's transfers (`bank.stream_transfers`) at PL2, epochs of 8 batches, on 4 partitions
and 2 workers, over few accounts so that batches of one epoch touch the same ones. Every
outcome and balance, read back from the committed output and changelog topics, must equal
`bank.transfer_reference` at PL2; and that reference must differ from the serial one for
this input, so the test shows the level in effect (a run at PL4 would fail it). Moved by
formula updates (`table.add`), the same transfers make and lose no money. `txstream verify`
replays the committed run on one engine at the same level and finds it equal, and names an
account whose changelog row is altered afterwards.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bank.stream_transfers import build_app
from bank.transfer_reference import reference
from orders.commits import CommitWatch
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.openings import send_broadcast, send_openings, transfer_outcomes
from tests.support.scale import LONG
from tests.support.service_process import ServiceProcess
from tests.support.simulation.spanning import random_transfers
from txstream import Isolation
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, transactional_producer_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing.verify import verify

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

PARTITIONS, WORKERS, ACCOUNTS, BATCHES, K, EPOCH = 4, 2, 8, 160, 2, 8


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "formulas",
    [
        pytest.param(False, id="puts", marks=pytest.mark.skipif(
            not LONG, reason="the same run with puts (~25 s): runs in make faults")),
        pytest.param(True, id="formulas"),
    ],
)  # fmt: skip
def test_transfers_at_pl2_equal_their_epoch_reference(
    kafka: KafkaEnv, tmp_path: Path, formulas: bool
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    rng = random.Random(11)
    opening = {a: rng.randint(50, 150) for a in range(ACCOUNTS)}
    transfers = random_transfers(rng, ACCOUNTS, BATCHES * K)
    batches = [transfers[i : i + K] for i in range(0, len(transfers), K)]
    want = reference(opening, batches, Isolation.PL2, EPOCH, formulas)
    assert want != reference(opening, batches), "this input must show the level"

    name = f"levels-{uuid.uuid4().hex[:8]}"
    app = build_app(name, Isolation.PL2, EPOCH, formulas)
    topics = AppTopics(name)
    ensure_app_topics(TopicAdmin(settings), app, PARTITIONS)
    registry = SchemaRegistry(settings.schema_dir)
    opens = BatchCodec(registry.get("bank.Opening"))
    moves = BatchCodec(registry.get("bank.Transfer"))
    params = json.dumps({"name": name, "isolation": "PL2", "epoch": EPOCH, "formulas": formulas})
    services = [
        ServiceProcess(settings, ["worker", "run", "--app", "bank.stream_transfers:from_params",
                                  "--params", params, "--instance-id", str(i), "--no-metrics"],
                       tmp_path / f"worker-{i}.log")
        for i in range(WORKERS)
    ]  # fmt: skip
    watch = CommitWatch(settings, topics.commits, PARTITIONS)
    producer = Producer(idempotent_producer_config(settings))
    try:
        per_partition = send_openings(producer, topics, opens, opening, PARTITIONS)
        assert producer.flush(60) == 0
        alive = lambda: all(s.alive() for s in services)  # noqa: E731
        watch.wait({"opens": per_partition}, 120, alive)
        send_broadcast(producer, topics, moves, batches, PARTITIONS)
        assert producer.flush(60) == 0
        watch.wait({"transfers": [BATCHES] * PARTITIONS}, 180, alive)
    finally:
        watch.close()
        for s in reversed(services):
            s.kill()
        kill_leftovers(settings.home)

    codec = BatchCodec(registry.get("bank.TransferOutcome"))
    outcomes = transfer_outcomes(settings, topics, codec, PARTITIONS)
    state = StateCodec(app.dataflow(), registry)
    tables = committed_tables(settings, state, topics.changelog, PARTITIONS)
    balances = {k[0]: row["balance"] for k, row in tables["accounts"].items()}
    assert (outcomes, balances) == want
    if formulas:
        assert sum(balances.values()) == sum(opening.values())

    verdict = verify(settings, app, PARTITIONS)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
    assert verdict.batches == BATCHES + sum(per_partition)
    account = max(balances)
    p = partition_of((account,), PARTITIONS)
    producer = Producer(transactional_producer_config(settings, f"alter-{name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topics.changelog, state.encode_row("accounts", {"balance": -1}),
                     state.key("accounts", (account,)), partition=p)  # fmt: skip
    producer.commit_transaction(30)
    found = verify(settings, app, PARTITIONS).divergence
    assert found is not None
    assert (found.partition, found.table, found.key) == (p, "accounts", (account,))
    assert found.committed == {"balance": -1} and found.reference == {"balance": balances[account]}
