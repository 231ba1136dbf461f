"""A spanning procedure's input interleaved with per-partition input, on the real broker.

TSpoon's transfers (`bank.stream_transfers`) on 2 partitions and one worker. First the
worker starts with openings and transfers both waiting: it takes every transfer before any
opening (the spanning input catches up with its end at the start, and the openings'
partitions stay paused meanwhile), so each of those transfers finds no account. Then more
accounts open while transfers flow, in alternating waves, and the worker is SIGKILLed in
the middle and started again: every transfer has one outcome, no money is made or lost, and
`txstream verify` replays the committed run to the same state. `make faults` kills it
after every other wave, on more seeds.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bank.stream_transfers import build_app
from orders.commits import CommitWatch
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.openings import send_openings, send_routed, transfer_outcomes
from tests.support.scale import LONG
from tests.support.service_process import ServiceProcess
from tests.support.simulation.spanning import random_transfers
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing.verify import verify

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

PARTITIONS, FIRST, WAVES, PER_WAVE, K = 2, 6, 8, 3, 2
# (seed, waves after which the worker is killed)
RUNS = [(5, (4,))] + ([(s, (1, 3, 5, 7)) for s in (6, 7, 8)] if LONG else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("seed", "kills"), RUNS)
def test_transfers_interleaved_with_openings_survive_sigkills(
    kafka: KafkaEnv, tmp_path: Path, seed: int, kills: tuple[int, ...]
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    rng = random.Random(seed)
    name = f"interleaved-{uuid.uuid4().hex[:8]}"
    app = build_app(name)
    topics = AppTopics(name)
    ensure_app_topics(TopicAdmin(settings), app, PARTITIONS)
    registry = SchemaRegistry(settings.schema_dir)
    opens, moves, outcome = (
        BatchCodec(registry.get(f"bank.{schema}"))
        for schema in ("Opening", "Transfer", "TransferOutcome")
    )
    producer = Producer(idempotent_producer_config(settings))
    opened: dict[int, int] = {}
    batches: list[list[dict[str, int]]] = []
    sent_opens = [0] * PARTITIONS

    def open_accounts(accounts: range) -> None:
        wave = {a: rng.randint(50, 150) for a in accounts}
        opened.update(wave)
        counts = send_openings(producer, topics, opens, wave, PARTITIONS, after=sent_opens)
        for p, n in enumerate(counts):
            sent_opens[p] += n

    def transfer(count: int) -> None:
        moves_ = random_transfers(rng, len(opened) + PER_WAVE, count * K)
        for i, t in enumerate(moves_):
            t["seq"] = len(batches) * K + i
        new = [moves_[i : i + K] for i in range(0, len(moves_), K)]
        send_routed(producer, topics, moves, new, PARTITIONS, first=len(batches) + 1)
        batches.extend(new)

    open_accounts(range(FIRST))
    transfer(10)
    assert producer.flush(60) == 0
    log = tmp_path / "worker.log"
    argv = ["worker", "run", "--app", "bank.stream_transfers:from_params",
            "--params", json.dumps({"name": name}), "--no-metrics"]  # fmt: skip
    worker = ServiceProcess(settings, argv, log)
    watch = CommitWatch(settings, topics.commits, PARTITIONS)
    alive: Callable[[], bool] = lambda: worker.alive()  # noqa: E731
    try:
        watch.wait({"transfers": [len(batches)] * PARTITIONS, "opens": sent_opens}, 120, alive)
        first = transfer_outcomes(settings, topics, outcome, PARTITIONS)
        assert set(first.values()) == {"no_account"}, "a transfer ran after an opening"
        assert "other input waits until" in log.read_text()

        for w in range(WAVES):  # openings and transfers on the same accounts, interleaved
            open_accounts(range(FIRST + w * PER_WAVE, FIRST + (w + 1) * PER_WAVE))
            transfer(6)
            producer.flush(60)
            if w in kills:
                watch.wait({"transfers": [len(batches) - 6] * PARTITIONS}, 120, alive)
                worker.kill()
                worker = ServiceProcess(settings, argv, log)
        assert producer.flush(60) == 0
        watch.wait({"transfers": [len(batches)] * PARTITIONS, "opens": sent_opens}, 180, alive)
    finally:
        watch.close()
        worker.kill()
        kill_leftovers(settings.home)

    got = transfer_outcomes(settings, topics, outcome, PARTITIONS)
    assert sorted(got) == list(range(len(batches) * K))
    assert "done" in got.values()
    codec = StateCodec(app.dataflow(), registry)
    tables = committed_tables(settings, codec, topics.changelog, PARTITIONS)
    assert sum(r["balance"] for r in tables["accounts"].values()) == sum(opened.values())
    verdict = verify(settings, app, PARTITIONS)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
