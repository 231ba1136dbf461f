"""The Faust worker service against the real broker: what it reads, where it resumes, how it stops.

These pin the three things the worker does that a plain Faust app would not: it reads only
committed input, it resumes at the positions committed with the engine's effects (not at
consumer-group offsets), and Faust's own offset commits never happen. Also that it publishes
its streams' schemas and marks each output with its writer schema (for readers after a schema
change).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient

from leaderboard.commits import committed_tables, wait_for_batches
from leaderboard.dataflow import Params
from leaderboard.loader import Loader
from leaderboard.results import result_document
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import iter_batches
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.leaderboard_driver import new_app
from tests.support.reference.leaderboard_ref import run_reference
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.clients import transactional_producer_config
from txstream.kafka.published_schemas import published
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.schemas.codec import WRITER_HEADER, BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec

PARAMS = Params(contestants=12, threshold=1000, window=100, slide=1)


class WorkerProcess(ServiceProcess):
    """`txstream worker run` of the leaderboard app."""

    def __init__(self, settings: Settings, app: App, log: Path) -> None:
        params = json.dumps({**asdict(PARAMS), "name": app.name})
        args = ["worker", "run", "--app", "leaderboard.dataflow:from_params", "--params", params]
        super().__init__(settings, args, log)


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()


def produce_aborted_batch(settings: Settings, app: App, batch_id: int) -> None:
    """A votes batch in an aborted transaction: a read_uncommitted reader would take it."""
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("leaderboard.Vote"))
    producer = Producer(transactional_producer_config(settings, f"aborter-{app.name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    vote = {"vote_id": 1, "phone_number": 5551234567, "contestant_number": 1}
    producer.produce(AppTopics(app.name).stream("votes"), codec.encode("votes", batch_id, [vote]))
    producer.flush(30)  # on the broker, not purged from the queue by the abort
    producer.abort_transaction(30)


def result(settings: Settings, app: App) -> dict[str, object]:
    codec = StateCodec(app.dataflow(), SchemaRegistry(settings.schema_dir))
    return result_document(committed_tables(settings, codec, AppTopics(app.name).changelog))


def group_offsets(settings: Settings, app: App) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    request = ConsumerGroupTopicPartitions(f"txstream-{app.name}")
    future = admin.list_consumer_group_offsets([request])[request.group_id]
    return {tp.partition: tp.offset for tp in future.result(30).topic_partitions}


def produce_votes(settings: Settings, app: App, votes: Path, ids: range) -> None:
    """The file's one-vote batches whose ids are in `ids`, in one transaction."""
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("leaderboard.Vote"))
    producer = Producer(transactional_producer_config(settings, f"votes-{app.name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    for batch in iter_batches(votes, 1):
        if batch.batch_id in ids:
            tuples = [dataclasses.asdict(v) for v in batch.votes]
            producer.produce(
                AppTopics(app.name).stream("votes"), codec.encode("votes", batch.batch_id, tuples)
            )
    producer.commit_transaction(30)


def test_worker_reads_committed_input_and_resumes_at_its_own_positions(
    settings: Settings, tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 3000, contestants=12, seed=5)
    app = new_app(PARAMS)
    topics = AppTopics(app.name)
    log = tmp_path / "worker.log"

    worker = WorkerProcess(settings, app, log)
    workers.append(worker)
    # the app needs its reference rows committed before any vote, as `leaderboard run` does
    Loader(settings, app).load_reference_data()
    reference_rows = {"contestant_rows": 1, "area_code_rows": 1}
    wait_for_batches(settings, topics.commits, reference_rows, 120, worker.alive)
    # ids above every real batch: if the worker read it, every later batch would be dropped
    # as a re-send and the result would differ from the reference
    produce_aborted_batch(settings, app, batch_id=10**9)
    produce_votes(settings, app, votes, range(1, 1001))
    wait_for_batches(settings, topics.commits, {"votes": 1000}, 120, worker.alive)
    assert worker.terminate() == 0, log.read_text()[-3000:]
    head = tmp_path / "head.txt"
    head.write_text("".join(votes.read_text().splitlines(keepends=True)[:1000]))
    expected = run_reference(head, contestants=12, threshold=1000, window=100, slide=1)
    got = result(settings, app)
    assert got == {k: expected[k] for k in got}
    assert all(offset < 0 for offset in group_offsets(settings, app).values()), (
        "Faust committed consumer-group offsets; only the engine's transactions may"
    )

    # a second incarnation resumes where the first one's commits end: offset 0 holds the
    # aborted batch, 1 its abort marker, 2..1001 the first 1000 batches
    produce_votes(settings, app, votes, range(1001, 3001))
    worker = WorkerProcess(settings, app, log)
    workers.append(worker)
    wait_for_batches(settings, topics.commits, {"votes": 3000}, 120, worker.alive)
    assert worker.terminate() == 0, log.read_text()[-3000:]
    assert f"resuming {topics.stream('votes')} partition 0 at offset 1002" in log.read_text()

    expected = run_reference(votes, contestants=12, threshold=1000, window=100, slide=1)
    got = result(settings, app)
    assert got == {k: expected[k] for k in got}
    accepted = BatchCodec(SchemaRegistry(settings.schema_dir).get("leaderboard.AcceptedVote"))
    ids = [
        accepted.decode(v).batch_id
        for _, v in read_to_end(settings, topics.stream("accepted_votes"))
    ]
    assert sorted(ids) == list(range(1, 3001)), "each batch exactly once across both incarnations"
    # Each output names the schema it was written with, which the worker published.
    outputs = read_to_committed_end(settings, topics.stream("accepted_votes"), 0)
    assert {dict(m.headers() or []).get(WRITER_HEADER) for m in outputs} == {
        accepted.fingerprint.encode()
    }
    versions = {(p.stream, p.fingerprint) for p in published(settings, topics)}
    assert ("accepted_votes", accepted.fingerprint) in versions
