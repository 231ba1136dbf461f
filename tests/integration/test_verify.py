"""`txstream verify` on the broker: the Leaderboard run by a real worker replays equal to what
it committed; a changelog record altered afterwards (a contestant's count off by one) is named
with both values and the vote batch that last wrote the row, and the command exits 1."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from confluent_kafka import Producer
from typer.testing import CliRunner

from leaderboard.commits import wait_for_batches
from leaderboard.dataflow import Params
from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv
from tests.support.leaderboard_driver import load_inputs, new_app
from tests.support.service_process import ServiceProcess
from txstream.cli.main import app as cli
from txstream.kafka.clients import transactional_producer_config
from txstream.kafka.topics import AppTopics
from txstream.recovery.changelog import partition_tables
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing.verify import verify

PARAMS = Params(contestants=6, threshold=300, window=50, slide=5)  # removals, slides


def test_a_committed_run_replays_equal_and_an_altered_row_is_named(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    app = new_app(PARAMS)
    topics = AppTopics(app.name)
    votes = tmp_path / "votes.txt"
    write_votes_file(votes, 800, contestants=6, seed=9)
    params = json.dumps({**asdict(PARAMS), "name": app.name})
    args = ["worker", "run", "--app", "leaderboard.dataflow:from_params", "--params", params]
    worker = ServiceProcess(settings, args, tmp_path / "worker.log")
    try:
        last = load_inputs(settings, app, votes, batch_size=3)
        wait_for_batches(settings, topics.commits, {"votes": last}, 120, worker.alive)
    finally:
        assert worker.terminate() == 0, (tmp_path / "worker.log").read_text()[-3000:]

    verdict = verify(settings, app, 1)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
    assert verdict.batches == last + 2  # the votes and the two reference batches
    env = {"TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap, "TXSTREAM_HOME": str(settings.home)}
    argv = ["verify", "--app", "leaderboard.dataflow:from_params", "--params", params]
    said = CliRunner().invoke(cli, argv, env=env)
    assert said.exit_code == 0, said.output
    assert "\nequal: " in said.output
    assert "not seen by this check:\n- a bug the engine and its replay share" in said.output

    codec = StateCodec(app.dataflow(), SchemaRegistry(settings.schema_dir))
    contestants = partition_tables(settings, codec, topics.changelog, 0)["contestants"]
    key, row = min(contestants.items())
    altered = {**row, "num_votes": row["num_votes"] + 1}
    producer = Producer(transactional_producer_config(settings, f"alter-{app.name}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topics.changelog, codec.encode_row("contestants", altered),
                     codec.key("contestants", key), partition=0)  # fmt: skip
    producer.commit_transaction(30)

    found = verify(settings, app, 1).divergence
    assert found is not None
    assert (found.partition, found.table, found.key) == (0, "contestants", key)
    assert found.committed == altered and found.reference == row
    assert found.last_write is not None and found.last_write[0] == "votes"
    said = CliRunner().invoke(cli, argv, env=env)
    assert said.exit_code == 1, said.output
    assert f"diverges at partition 0, table 'contestants', key {list(key)!r}" in said.output
