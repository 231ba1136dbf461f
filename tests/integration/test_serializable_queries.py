"""Serializable and snapshot queries across engines on the real broker: one consistent cut.

TSpoon's transfers (`bank.stream_transfers`, a spanning procedure) run on 4 partitions and 2
workers while a client reads every account through the coordinator, serializable and
snapshot in turn, over and over. Each answer names the batch it is as of, and must be
exactly the serial execution's balances after that batch, on every engine at once; several
answers must fall while the transfers are still running, or the test would only have read
a quiet table. So the transfers go in steps, each sent once an answer shows a batch of the
step before: the reads interleave with the engines' work by construction, not by timing (a
slow run once left only two answers inside the run).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bank.stream_transfers import build_app
from orders.commits import CommitWatch
from tests.simulation.test_spanning import serial_transfers
from tests.support.http_json import http
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.killer import kill_leftovers
from tests.support.openings import send_openings, send_routed
from tests.support.service_process import TXSTREAM, ServiceProcess
from tests.support.simulation.spanning import random_transfers
from txstream.client import TxClient
from txstream.commit.markers import COMMIT_END_HEADER, spans_of
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry

pytestmark = pytest.mark.kafka

PARTITIONS, WORKERS, ACCOUNTS, BATCHES, K = 4, 2, 40, 600, 4
STEP = 100  # batches sent at a time


class Answered:
    """The newest batch any answer so far is as of, for the sender to wait on."""

    def __init__(self) -> None:
        self.at = 0
        self.changed = threading.Condition()

    def note(self, at: int | None) -> None:
        with self.changed:
            self.at = max(self.at, at or 0)
            self.changed.notify_all()

    def wait_past(self, batch: int, timeout_s: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.at > batch, timeout_s)


@pytest.mark.timeout(300)
def test_serializable_queries_read_one_batch_on_every_engine(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    rng = random.Random(5)
    opening = {a: rng.randint(0, 100) for a in range(ACCOUNTS)}
    transfers = random_transfers(rng, ACCOUNTS, BATCHES * K)
    batches = [transfers[i : i + K] for i in range(0, len(transfers), K)]
    app = build_app(f"cuts-{uuid.uuid4().hex[:8]}")
    topics = AppTopics(app.name)
    ensure_app_topics(TopicAdmin(settings), app, PARTITIONS)
    registry = SchemaRegistry(settings.schema_dir)
    opens = BatchCodec(registry.get("bank.Opening"))
    moves = BatchCodec(registry.get("bank.Transfer"))
    spec = [
        "--app",
        "bank.stream_transfers:from_params",
        "--params",
        json.dumps({"name": app.name}),
    ]
    services = [
        ServiceProcess(settings, ["worker", "run", *spec, "--instance-id", str(i), "--no-metrics"],
                       tmp_path / f"worker-{i}.log")
        for i in range(WORKERS)
    ]  # fmt: skip
    http_port = free_port()
    services.append(
        ServiceProcess(settings, ["coordinator", "run", *spec, "--metrics-port", "0",
                                  "--http-port", str(http_port)], tmp_path / "coordinator.log")
    )  # fmt: skip
    watch = CommitWatch(settings, topics.commits, PARTITIONS)
    producer = Producer(idempotent_producer_config(settings))
    answers: list[tuple[int | None, dict[int, int]]] = []
    try:
        per_partition = send_openings(producer, topics, opens, opening, PARTITIONS)
        assert producer.flush(60) == 0
        alive = lambda: all(s.alive() for s in services)  # noqa: E731
        watch.wait({"opens": per_partition}, 120, alive)
        done = threading.Event()
        answered = Answered()
        failed: list[str] = []  # why the sender stopped early (its thread cannot assert)

        def send_and_wait() -> None:
            for first in range(1, BATCHES + 1, STEP):
                step = batches[first - 1 : first - 1 + STEP]
                send_routed(producer, topics, moves, step, PARTITIONS, first)
                if producer.flush(60) != 0:
                    failed.append(f"batches from {first} not all sent within 60 s")
                    return
                if first + STEP <= BATCHES and not answered.wait_past(first - 1, 60):
                    failed.append(f"no answer showed a batch from {first} within 60 s")
                    return
            watch.wait({"transfers": [BATCHES] * PARTITIONS}, 200, alive)
            done.set()

        waiter = threading.Thread(target=send_and_wait)
        waiter.start()
        with TxClient(app.name, settings, timeout_s=30) as client:
            levels = itertools.cycle(["serializable", "snapshot"])
            while not done.is_set() and waiter.is_alive():
                r = client.query("accounts", isolation=next(levels))
                assert r.ok, f"{r.reason}: {r.detail}"
                answered.note(r.at)
                answers.append((r.at, {int(k[0]): row["balance"] for k, row in r.table_rows()}))
            waiter.join(10)
            assert not failed, failed[0]
            assert done.is_set(), "the transfers did not all commit"
            last = client.query("accounts", isolation="serializable")
            answers.append((last.at, {int(k[0]): row["balance"] for k, row in last.table_rows()}))
        # the same query from the shell and over HTTP
        env = {**os.environ, "TXSTREAM_HOME": str(settings.home),
               "TXSTREAM_KAFKA_BOOTSTRAP": settings.bootstrap_servers}  # fmt: skip
        shell = subprocess.run(
            [TXSTREAM, "query", "--app", app.name, "--table", "accounts",
             "--isolation", "serializable", "--agg", "sum:balance"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        status, web = http(f"http://127.0.0.1:{http_port}/tables/accounts?isolation=serializable")
    finally:
        watch.close()
        for s in reversed(services):
            s.kill()
        kill_leftovers(settings.home)

    assert answers[-1][0] == BATCHES
    total = sum(opening.values())
    assert json.loads(shell.stdout)["row"] == {"sum_balance": total}, shell.stdout
    assert f"as of batch {BATCHES}" in shell.stderr
    assert (status, web["at"]) == (200, BATCHES), web
    assert {k[0]: row["balance"] for k, row in web["rows"]} == answers[-1][1]
    for at, balances in answers:
        assert at is not None
        expected = serial_transfers(opening, [t for b in batches[:at] for t in b])
        assert balances == expected, f"as of batch {at}"
    during = {at for at, _ in answers if at is not None and 0 < at < BATCHES}
    assert len(during) >= 3, f"only {sorted(during)} read while the transfers ran"
    parts = spanning_parts(settings, topics)
    assert set(parts) == set(range(1, BATCHES + 1)), "a batch's parts are not all marked"
    for b, engines in parts.items():
        owners = {partition_of((t[f],), PARTITIONS) for t in batches[b - 1] for f in PARTIES}
        assert engines == owners, f"batch {b}: parts marked on {engines}, owners {owners}"


PARTIES = ("payer", "payee")


def spanning_parts(settings: Settings, topics: AppTopics) -> dict[int, set[int]]:
    """Batch id -> the engines whose changelog marks a part of it at a commit's end
    (`commit.markers`, for the warehouse's consistent cut), each naming the same engines."""
    parts: dict[int, set[int]] = {}
    for p in range(PARTITIONS):
        for msg in read_to_committed_end(settings, topics.changelog, p):
            header = dict(msg.headers() or []).get(COMMIT_END_HEADER)
            for span in spans_of(header):
                assert span.stream == "transfers" and p in span.participants, span
                assert parts.setdefault(span.batch_id, set(span.participants)) == set(
                    span.participants
                )
    return parts
