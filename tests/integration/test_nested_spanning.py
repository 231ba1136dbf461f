"""A nested transaction spanning engines on the real broker: `bank.nested_transfers`
(withdraw, then deposit) on 4 partitions and 2 workers equals the same batches on one
engine (`AppTester`), some batches aborting whole on a payee with no account."""

from __future__ import annotations

import json
import random
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bank.nested_transfers import build_app
from orders.commits import CommitWatch
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.openings import send_openings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config, send
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.supervisor import Policy, Supervised
from txstream.state.codec import StateCodec
from txstream.testing import AppTester

PARTITIONS, WORKERS, ACCOUNTS = 4, 2, 30


@pytest.mark.timeout(300)
def test_nested_transfers_across_engines_equal_one_engine(kafka: KafkaEnv, tmp_path: Path) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    rng = random.Random(11)
    opening = {a: rng.randint(0, 100) for a in range(ACCOUNTS)}
    transfers = [
        {"seq": i, "payer": rng.randrange(ACCOUNTS), "payee": rng.randrange(ACCOUNTS + 1),
         "amount": rng.randint(1, 60)}
        for i in range(400)
    ]  # fmt: skip
    batches = [transfers[i : i + 4] for i in range(0, len(transfers), 4)]
    app = build_app(f"nested-{uuid.uuid4().hex[:8]}")
    topics = AppTopics(app.name)
    ensure_app_topics(TopicAdmin(settings), app, PARTITIONS)
    registry = SchemaRegistry(settings.schema_dir)
    opens, moves = (
        BatchCodec(registry.get("bank.Opening")),
        BatchCodec(registry.get("bank.Transfer")),
    )
    argv = [str(Path(sys.executable).with_name("txstream")), "worker", "run", "--app",
            "bank.nested_transfers:from_params", "--params", json.dumps({"name": app.name}),
            "--no-metrics"]  # fmt: skip
    workers = [
        Supervised(
            f"worker-{i}",
            [*argv, "--instance-id", str(i)],
            settings,
            policy=Policy(max_restarts=5, window_s=60.0),
        )
        for i in range(WORKERS)
    ]
    watch = CommitWatch(settings, topics.commits, PARTITIONS)
    producer = Producer(idempotent_producer_config(settings))
    try:
        for w in workers:
            w.start()
        per_partition = send_openings(producer, topics, opens, opening, PARTITIONS)
        assert producer.flush(60) == 0
        alive = lambda: all(w.supervisor.live_pid() is not None for w in workers)  # noqa: E731
        # the accounts are open before any transfer: a spanning stream is ordered against
        # other input only through commits
        watch.wait({"opens": per_partition}, 120, alive)
        for b, batch in enumerate(batches, 1):
            for p in range(PARTITIONS):  # the spanning input reaches every engine
                send(producer, topics.stream("transfers"), moves.encode("transfers", b, batch),
                     partition=p)  # fmt: skip
        assert producer.flush(60) == 0
        watch.wait({"transfers": [len(batches)] * PARTITIONS}, 200, alive)
    finally:
        watch.close()
        for w in reversed(workers):
            w.stop()
        kill_leftovers(settings.home)

    one = AppTester(build_app())
    for a, balance in opening.items():
        one.feed("opens", [{"account": a, "balance": balance}])
    for batch in batches:
        one.feed("transfers", batch)
    codec = StateCodec(app.dataflow(), registry)
    tables = committed_tables(settings, codec, topics.changelog, PARTITIONS)
    assert tables["accounts"] == one.table("accounts")
    assert sum(r["balance"] for r in tables["accounts"].values()) == sum(opening.values())
    outcome = BatchCodec(registry.get("bank.TransferOutcome"))
    for stream in ("refusals", "transfers_done"):
        got = sorted(
            t["seq"]
            for p in range(PARTITIONS)
            for msg in read_to_committed_end(settings, topics.stream(stream), p)
            for t in outcome.decode(msg.value() or b"").tuples
        )
        assert got == sorted(t["seq"] for t in one.outputs(stream)), stream
    assert one.aborts, "no batch aborted whole: the test lost its point"
    schema = registry.get("txstream.AbortRecord")
    dead = [
        decode_record(schema, msg.value() or b"")
        for p in range(PARTITIONS)
        for msg in read_to_committed_end(settings, topics.aborts, p)
    ]
    # each aborted batch once (its leader speaks for every engine), named as on one engine
    assert sorted((d["procedure"], d["batch_id"], d["reason"]) for d in dead) == sorted(
        (a.procedure, a.batch_id, a.reason) for a in one.aborts
    )
