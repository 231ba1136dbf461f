"""`txstream topics|produce|consume|schemas` against the real broker, and the admin helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner, Result

from bank.stream_transfers import build_app as build_transfers
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.kafka_reads import read_to_end, read_until
from txstream.cli.main import app
from txstream.config import Settings, default_schema_dir
from txstream.kafka.admin import (
    BrokerUnreachableError,
    TopicAdmin,
    TopicDescription,
    TopicExistsError,
    TopicNotFoundError,
)
from txstream.kafka.clients import idempotent_producer_config, read_committed_consumer_config
from txstream.kafka.routing import LEADER_KEY, partition_of
from txstream.oltp.messages import CoordinatorLog, Decision, Wire
from txstream.oltp.origin import Origin
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry

pytestmark = pytest.mark.kafka

TIMEOUT_S = 30.0
TXSTREAM = str(Path(sys.executable).parent / "txstream")
VOTE: dict[str, Any] = {
    "type": "record",
    "name": "Vote",
    "namespace": "clitest",
    "fields": [
        {"name": "phone", "type": "long"},
        {"name": "state", "type": "string"},
        {"name": "contestant_number", "type": "int"},
    ],
}
VOTES = [
    {"phone": 6175550101, "state": "MA", "contestant_number": 3},
    {"phone": 2125550199, "state": "NY", "contestant_number": 1},
    {"phone": 6175550102, "state": "MA", "contestant_number": 2},
]


@pytest.fixture
def env(kafka: KafkaEnv, tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: the test broker and a schema dir holding only the test schema."""
    schema_dir = tmp_path / "schemas"
    schema_dir.mkdir()
    (schema_dir / "vote.avsc").write_text(json.dumps(VOTE))
    return {"TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap, "TXSTREAM_SCHEMA_DIR": str(schema_dir)}


def run(env: dict[str, str], *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input, env=env)


def lines(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def admin(kafka: KafkaEnv) -> TopicAdmin:
    return TopicAdmin(Settings(kafka_bootstrap=kafka.bootstrap))


def committed_values(
    kafka: KafkaEnv, topic: str, until: Callable[[list[bytes]], bool]
) -> list[bytes]:
    """read_committed values of partition 0 from the start, until `until` holds."""
    settings = Settings(kafka_bootstrap=kafka.bootstrap)
    config = read_committed_consumer_config(settings, f"test-{uuid.uuid4().hex}")
    return read_until(config, topic, until)


def consume_json(env: dict[str, str], topic: str, *extra: str) -> list[Any]:
    result = run(env, "consume", "--topic", topic, "--idle-timeout", "3", *extra)
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


# --- topics -----------------------------------------------------------------------------------


def test_topics_create_list_describe(kafka: KafkaEnv, env: dict[str, str]) -> None:
    name = f"cli-topics-{uuid.uuid4().hex[:8]}"
    created = run(
        env, "topics", "create", name, "--partitions", "3", "--compact",
        "--config", "retention.ms=3600000",
    )  # fmt: skip
    assert created.exit_code == 0, created.stderr
    assert f"created topic {name}" in created.stdout

    listed = run(env, "topics", "list")
    assert listed.exit_code == 0, listed.stderr
    assert name in listed.stdout.splitlines()

    described = run(env, "topics", "describe", name)
    assert described.exit_code == 0, described.stderr
    assert f"topic {name}: partitions=3" in described.stdout
    assert "cleanup.policy=compact" in described.stdout
    assert "retention.ms=3600000" in described.stdout

    topic = admin(kafka).describe_topic(name)
    assert [p.partition for p in topic.partitions] == [0, 1, 2]
    assert all(p.leader >= 0 and p.end_offset == 0 for p in topic.partitions)
    assert topic.config == {"cleanup.policy": "compact", "retention.ms": "3600000"}


def test_topics_create_refuses_an_existing_topic(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-exists")
    result = run(env, "topics", "create", topic)
    assert result.exit_code == 1
    assert f"topic '{topic}' already exists" in result.stderr
    with pytest.raises(TopicExistsError):
        admin(kafka).create_topic(topic)


def test_delete_topics_waits_until_they_are_gone(
    kafka: KafkaEnv, new_topic: Callable[..., str]
) -> None:
    names = [new_topic("del-a"), new_topic("del-b")]
    topics = admin(kafka)
    topics.delete_topics([*names, "no-such-topic-to-delete"])  # one already gone is no error
    assert not set(names) & set(topics.list_topics())
    with pytest.raises(TopicNotFoundError):
        topics.describe_topic(names[0])


def test_topics_delete_takes_names_and_prefixes_and_lists_first_on_a_dry_run(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    stem = f"cli-del-{uuid.uuid4().hex[:8]}"
    by_prefix = [new_topic(f"{stem}.a"), new_topic(f"{stem}.b", partitions=2)]
    named, kept = new_topic("cli-del-named"), new_topic(f"{stem}x")
    topics = admin(kafka)

    dry = run(env, "topics", "delete", named, "--prefix", f"{stem}.", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert dry.stdout.splitlines() == sorted([*by_prefix, named])
    assert "would delete 3 topics" in dry.stderr
    assert {*by_prefix, named, kept} <= set(topics.list_topics())

    done = run(env, "topics", "delete", named, "--prefix", f"{stem}.")
    assert done.exit_code == 0, done.stderr
    assert done.stdout.splitlines() == sorted([*by_prefix, named])
    left = set(topics.list_topics())
    assert not {*by_prefix, named} & left
    assert kept in left


def test_topics_delete_names_a_missing_topic_and_deletes_nothing(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    there = new_topic("cli-del-there")
    missing = f"cli-del-missing-{uuid.uuid4().hex[:8]}"
    result = run(env, "topics", "delete", there, missing)
    assert result.exit_code == 1
    assert f"no such topic: {missing}; nothing deleted" in result.stderr
    assert there in admin(kafka).list_topics()
    for args in ([], ["--prefix", ""]):
        refused = run(env, "topics", "delete", *args)
        assert refused.exit_code == 2
        assert "name the topics" in refused.stderr or "every topic" in refused.stderr


def test_topics_create_names_a_bad_config(env: dict[str, str]) -> None:
    name = f"cli-badcfg-{uuid.uuid4().hex[:8]}"
    malformed = run(env, "topics", "create", name, "--config", "retention.ms")
    assert malformed.exit_code == 2
    assert "retention.ms" in malformed.output
    unknown = run(env, "topics", "create", name, "--config", "no.such.setting=1")
    assert unknown.exit_code == 1
    assert "no.such.setting" in unknown.stderr


def test_describe_names_a_missing_topic(kafka: KafkaEnv, env: dict[str, str]) -> None:
    result = run(env, "topics", "describe", "no-such-topic-here")
    assert result.exit_code == 1
    assert "topic 'no-such-topic-here' does not exist" in result.stderr
    with pytest.raises(TopicNotFoundError):
        admin(kafka).describe_topic("no-such-topic-here")


def test_an_unreachable_broker_is_reported_within_the_timeout() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError, match=f"no Kafka broker answered at {nowhere}"):
        TopicAdmin(Settings(kafka_bootstrap=nowhere), timeout_s=1.0).list_topics()
    assert time.monotonic() - started < 5.0


# --- produce and consume ----------------------------------------------------------------------


def test_plain_produce_consume_round_trip(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-plain", partitions=2)
    result = run(
        env, "produce", "--topic", topic, "--schema", "clitest.Vote", "--key-field", "state",
        input=lines(*VOTES),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert f"produced 3 records to {topic} in one transaction" in result.stderr

    consumed = consume_json(env, topic)
    assert sorted(consumed, key=str) == sorted(VOTES, key=str)
    # Keyed by state, the two MA votes share a partition and keep their order. Each partition
    # holds its records plus the transaction's commit marker.
    assert sorted(end_offsets(kafka, topic)) in ([0, 4], [2, 3])
    assert [v for v in consumed if v["state"] == "MA"] == [VOTES[0], VOTES[2]]


def test_keyed_records_land_on_the_partition_the_routing_function_names(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-routed", partitions=5)
    phones = [6175550000 + i for i in range(40)]
    votes = [{"phone": p, "state": f"S{p % 50}", "contestant_number": 1} for p in phones]
    result = run(
        env, "produce", "-t", topic, "-s", "clitest.Vote", "--key-field", "phone",
        input=lines(*votes),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    schema = SchemaRegistry(Path(env["TXSTREAM_SCHEMA_DIR"])).get("clitest.Vote")
    placed = {
        decode_record(schema, value)["phone"]: p
        for p in range(5)
        for _, value in read_to_end(kafka.settings, topic, p)
    }
    assert placed == {p: partition_of((p,), 5) for p in phones}


def test_consume_takes_the_schema_from_the_header_or_the_option(
    env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-header")
    produced = run(env, "produce", "-t", topic, "-s", "clitest.Vote", input=lines(*VOTES))
    assert produced.exit_code == 0, produced.stderr
    assert consume_json(env, topic, "--schema", "clitest.Vote", "--max", "2") == VOTES[:2]
    assert consume_json(env, topic, "--max", "1") == VOTES[:1]


def test_envelope_produce_consume_round_trip(
    env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-envelope")
    batches = [
        {"batch_id": 1, "tuples": VOTES[:2]},
        {"batch_id": 2, "tuples": []},
        {"batch_id": 3, "tuples": VOTES[2:]},
    ]
    result = run(
        env, "produce", "-t", topic, "-s", "clitest.Vote", "--envelope", "votes",
        input=lines(*batches),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "produced 3 batches (3 tuples) of stream votes" in result.stderr

    consumed = consume_json(env, topic, "--envelope")
    assert consumed == [{"stream": "votes", **b} for b in batches]


def test_broadcast_batches_land_on_every_partition_in_order(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    """The input of a spanning procedure: every engine must see every batch."""
    topic = new_topic("cli-broadcast", partitions=3)
    batches = [{"batch_id": b, "tuples": VOTES[b - 1 : b]} for b in (1, 2, 3)]
    result = run(
        env, "produce", "-t", topic, "-s", "clitest.Vote", "--envelope", "votes", "--broadcast",
        input=lines(*batches),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "produced 3 batches (3 tuples) of stream votes to every partition" in result.stderr
    codec = BatchCodec(SchemaRegistry(Path(env["TXSTREAM_SCHEMA_DIR"])).get("clitest.Vote"))
    for p in range(3):
        got = [codec.decode(v) for _, v in read_to_end(kafka.settings, topic, p)]
        assert [(b.batch_id, list(b.tuples)) for b in got] == [
            (b["batch_id"], b["tuples"]) for b in batches
        ]
    refused = run(env, "produce", "-t", topic, "-s", "clitest.Vote", "--envelope", "votes",
                  "--broadcast", "--key-field", "state", input=lines(*batches))  # fmt: skip
    assert refused.exit_code == 2
    assert "--broadcast places every batch on every partition" in refused.stderr


def test_a_progress_mark_follows_the_batches_on_every_partition(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    """What lets an ordered repartitioned procedure pass partitions with no part of the
    last batches: after them, every partition is told that every batch up to 7 is sent."""
    topic = new_topic("cli-progress", partitions=3)
    batches = [{"batch_id": b, "tuples": VOTES[i : i + 1]} for i, b in enumerate((3, 7))]
    result = run(
        env, "produce", "-t", topic, "-s", "clitest.Vote", "--envelope", "votes",
        "--key-field", "state", "--progress", input=lines(*batches),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "produced 2 batches (2 tuples) of stream votes" in result.stderr
    assert "and a progress mark at batch 7 to every partition" in result.stderr
    codec = BatchCodec(SchemaRegistry(Path(env["TXSTREAM_SCHEMA_DIR"])).get("clitest.Vote"))
    got = [[codec.decode(v) for _, v in read_to_end(kafka.settings, topic, p)] for p in range(3)]
    assert [(b.stream, b.batch_id, list(b.tuples)) for log in got for b in log[-1:]] == [
        ("__progress__", 7, [])
    ] * 3
    assert sorted(b.batch_id for log in got for b in log[:-1]) == [3, 7]
    refused = run(env, "produce", "-t", topic, "-s", "clitest.Vote", "--progress",
                  input=lines(*VOTES))  # fmt: skip
    assert refused.exit_code == 2
    assert "--progress marks batches: it needs --envelope" in refused.stderr


def test_routed_batches_go_only_where_their_keys_live_with_progress_marks(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    """A spanning procedure's input placed by its declared keys (`bank.stream_transfers`:
    a transfer touches its payer and payee): each partition gets the batches with a payer
    or payee it owns (worked out here), and a progress mark of the highest id if it did
    not get that batch."""
    topic = new_topic("cli-route", partitions=3)
    moves = [(0, 1), (2, 2), (4, 5), (1, 3)]
    batches = [{"batch_id": b, "tuples": [{"seq": b, "payer": x, "payee": y, "amount": 1}]}
               for b, (x, y) in enumerate(moves, 1)]  # fmt: skip
    args = ["produce", "-t", topic, "-s", "bank.Transfer", "--envelope", "transfers", "--app",
            "bank.stream_transfers:from_params", "--route"]  # fmt: skip
    result = run(env, *args, input=lines(*batches))
    assert result.exit_code == 0, result.stderr
    assert "produced 4 batches (4 tuples) of stream transfers to the partitions" in result.stderr
    registry = build_transfers().schema_registry(Path(env["TXSTREAM_SCHEMA_DIR"]))
    codec = BatchCodec(registry.get("bank.Transfer"))
    for p in range(3):
        keyed = [(k, codec.decode(v)) for k, v in read_to_end(kafka.settings, topic, p)]
        got = [b for _, b in keyed]
        want = [b for b, (x, y) in enumerate(moves, 1)
                if p in {partition_of((x,), 3), partition_of((y,), 3)}]  # fmt: skip
        leading = [b for b, (x, y) in enumerate(moves, 1)
                   if p == min(partition_of((x,), 3), partition_of((y,), 3))]  # fmt: skip
        assert [b.batch_id for k, b in keyed if k == LEADER_KEY] == leading, f"partition {p}"
        marks = [] if want and want[-1] == 4 else [4]
        assert [b.batch_id for b in got if b.stream == "transfers"] == want, f"partition {p}"
        assert [b.batch_id for b in got if b.stream == "__progress__"] == marks, f"partition {p}"
    refused = run(env, *args[:-3], "--broadcast", "--route", input=lines(*batches))
    assert refused.exit_code == 2
    assert "--route places each batch by the keys" in refused.stderr
    wrong = run(env, "produce", "-t", topic, "-s", "bank.Opening", "--envelope", "opens",
                "--app", "bank.stream_transfers:from_params", "--route",
                input=lines({"batch_id": 1, "tuples": [{"account": 1, "balance": 5}]}))  # fmt: skip
    assert wrong.exit_code == 2
    assert "stream 'opens' is not a spanning procedure's input" in wrong.stderr


def test_an_envelope_batch_has_one_partition_key(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-envkey")
    mixed = {"batch_id": 1, "tuples": VOTES[:2]}  # MA then NY
    result = run(
        env, "produce", "-t", topic, "-s", "clitest.Vote", "--envelope", "votes",
        "--key-field", "state", input=lines(mixed),
    )  # fmt: skip
    assert result.exit_code == 2
    assert (
        """line 1: field 'tuples[1].state': "NY" differs from tuples[0]'s "MA\"""" in result.stderr
    )
    assert end_offsets(kafka, topic) == [0]


def end_offsets(kafka: KafkaEnv, topic: str) -> list[int]:
    return [p.end_offset for p in admin(kafka).describe_topic(topic).partitions]


def assert_nothing_committed(kafka: KafkaEnv, env: dict[str, str], topic: str) -> None:
    """No transaction was begun (the log is empty) and readers see only what comes after."""
    topic_state: TopicDescription = admin(kafka).describe_topic(topic)
    assert [(p.end_offset, p.stable_offset) for p in topic_state.partitions] == [(0, 0)]
    # A later good record is the first thing a read_committed reader sees.
    sentinel = {"phone": 1, "state": "ZZ", "contestant_number": 0}
    produced = run(env, "produce", "-t", topic, "-s", "clitest.Vote", input=lines(sentinel))
    assert produced.exit_code == 0, produced.stderr
    assert len(committed_values(kafka, topic, lambda v: len(v) >= 1)) == 1
    assert consume_json(env, topic) == [sentinel]


def test_a_record_that_does_not_fit_stops_everything(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-invalid")
    bad = {"phone": 6175550103, "state": "MA", "contestant_number": "abc"}
    result = run(env, "produce", "-t", topic, "-s", "clitest.Vote", input=lines(*VOTES[:2], bad))
    assert result.exit_code == 2
    assert "line 3: field 'contestant_number': expected int, got \"abc\"" in result.stderr
    assert "nothing was produced" in result.stderr
    assert_nothing_committed(kafka, env, topic)


def test_malformed_json_names_its_line(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-json")
    text = lines(VOTES[0]) + "\n" + '{"phone": 1, "state": "MA",\n' + lines(VOTES[1])
    result = run(env, "produce", "-t", topic, "-s", "clitest.Vote", input=text)
    assert result.exit_code == 2
    assert "line 3: malformed JSON" in result.stderr
    assert_nothing_committed(kafka, env, topic)


def test_produce_reads_a_file_and_names_unknown_schemas_and_fields(
    tmp_path: Path, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    topic = new_topic("cli-file")
    source = tmp_path / "votes.jsonl"
    source.write_text(lines(*VOTES))
    unknown = run(env, "produce", "-t", topic, "-s", "clitest.Vot", "-f", str(source))
    assert unknown.exit_code == 2
    assert "clitest.Vot" in unknown.output
    no_field = run(env, "produce", "-t", topic, "-s", "clitest.Vote", "-f", str(source),
                   "--key-field", "region")  # fmt: skip
    assert no_field.exit_code == 2
    assert "region" in no_field.output

    ok = run(env, "produce", "-t", topic, "-s", "clitest.Vote", "-f", str(source))
    assert ok.exit_code == 0, ok.stderr
    assert consume_json(env, topic) == VOTES


def test_a_producer_killed_mid_transaction_leaves_nothing_committed(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str], tmp_path: Path
) -> None:
    """kill -9 after some records reached the log but before the commit."""
    topic = new_topic("cli-crash")
    source = tmp_path / "many.jsonl"
    source.write_text(
        "".join(
            f'{{"phone": {i}, "state": "MA", "contestant_number": {i % 10}}}\n'
            for i in range(200_000)
        )
    )
    log = tmp_path / "produce.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [TXSTREAM, "produce", "-t", topic, "-s", "clitest.Vote", "-f", str(source)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60.0
        while end_offsets(kafka, topic)[0] == 0:
            assert proc.poll() is None, f"producer ended before the kill: {log.read_text()}"
            assert time.monotonic() < deadline, "producer never wrote a record"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=TIMEOUT_S)

    state = admin(kafka).describe_topic(topic).partitions[0]
    assert state.end_offset > 0  # records reached the log...
    assert state.stable_offset == 0  # ...inside a transaction that never committed
    assert consume_json(env, topic) == []


# --- schemas ----------------------------------------------------------------------------------


def test_schemas_check_reports_compatibility_with_exit_codes(
    env: dict[str, str], tmp_path: Path
) -> None:
    def with_source(**extra: str) -> str:
        source = {"name": "source", "type": "string", **extra}
        return json.dumps({**VOTE, "fields": [*VOTE["fields"], source]})

    old = tmp_path / "old.avsc"
    old.write_text(json.dumps(VOTE))
    new = tmp_path / "new.avsc"

    new.write_text(with_source())
    incompatible = run(env, "schemas", "check", str(old), str(new))
    assert incompatible.exit_code == 1
    assert "incompatible" in incompatible.stdout
    assert "field 'source' is in the reader but not the writer" in incompatible.stdout

    new.write_text(with_source(default="sms"))
    compatible = run(env, "schemas", "check", str(old), str(new))
    assert compatible.exit_code == 0, compatible.output
    assert compatible.stdout.startswith("compatible")

    new.write_text("{not json")
    broken = run(env, "schemas", "check", str(old), str(new))
    assert broken.exit_code == 2
    assert f"{new}: invalid JSON" in broken.stderr


def test_schemas_list_names_types_and_files(env: dict[str, str]) -> None:
    result = run(env, "schemas", "list")
    assert result.exit_code == 0, result.stderr
    listed = dict(line.split() for line in result.stdout.splitlines())
    assert listed["clitest.Vote"] == str(Path(env["TXSTREAM_SCHEMA_DIR"]) / "vote.avsc")
    # txstream's own record types come with it, from its own directory
    assert listed["txstream.AbortRecord"] == str(default_schema_dir() / "txstream/AbortRecord.avsc")
    assert all(name == "clitest.Vote" or name.startswith("txstream.") for name in listed)


def test_consume_decodes_oltp_messages_after_their_type_byte(
    kafka: KafkaEnv, env: dict[str, str], new_topic: Callable[..., str]
) -> None:
    """An OLTP topic's records are a type byte, then the record: `consume --schema
    txstream.Decision` reads past the byte, and names a record of another type."""
    topic = new_topic("cli-oltp")
    wire = Wire(SchemaRegistry(Settings().schema_dir))
    producer = Producer(idempotent_producer_config(Settings(kafka_bootstrap=kafka.bootstrap)))
    signed = Wire(SchemaRegistry(Settings().schema_dir), Origin(b"k" * 32))
    producer.produce(topic, wire.encode(Decision("t-1", 3, True)), partition=0)
    producer.produce(topic, signed.encode(Decision("t-2", 4, False)), partition=0)
    producer.produce(topic, wire.encode(CoordinatorLog("epoch", 3)), partition=0)
    assert producer.flush(30) == 0
    # a service's record ends in its tag (`oltp.origin`), which is read past, not shown
    got = consume_json(env, topic, "--schema", "txstream.Decision", "--max", "2")
    assert got == [{"txn_id": "t-1", "epoch": 3, "commit": True},
                   {"txn_id": "t-2", "epoch": 4, "commit": False}]  # fmt: skip
    wrong = run(env, "consume", "--topic", topic, "--schema", "txstream.Decision",
                "--idle-timeout", "3")  # fmt: skip
    assert wrong.exit_code != 0
    assert wrong.stderr.strip().endswith(
        "not a txstream.Decision message: type byte b'L', not b'D'"
    ), wrong.stderr
