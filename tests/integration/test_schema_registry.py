"""The schema registry on the real broker, with confluent-kafka's own client and serializer.

A producer using `AvroSerializer` against `txstream registry run` sends votes in Confluent's
wire format; the sequencer, whose route reads that format, registered the stream's schema
at start-up, reads each record with its writer schema and seals it into the votes stream.
A producer whose schema the subject's compatibility level refuses is refused by the
registry; a framed record naming an id the registry lacks is a dead letter naming the id.
The registry, SIGKILLed and started again, serves the same ids from its Kafka topic; a
second one started on the same topic fences the first.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.http_json import http
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.sequencer_driver import (
    SequencerProcess,
    read_batches,
    read_dead_letters,
    unique,
    wait_until,
    write_config,
)
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.schemas.confluent import frame
from txstream.schemas.registry import SchemaRegistry, to_avsc

pytestmark = pytest.mark.kafka

VOTES = [{"vote_id": n, "phone_number": 6175550100 + n, "contestant_number": n % 3 + 1}
         for n in range(1, 6)]  # fmt: skip


def start_registry(settings: Settings, port: int, log: Path) -> ServiceProcess:
    proc = ServiceProcess(settings, ["registry", "run", "--port", str(port)], log)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{settings.schema_registry_url}/subjects", timeout=5):
                return proc
        except OSError:
            assert proc.alive(), log.read_text()
            assert time.monotonic() < deadline, "the registry did not answer within 60 s"
            time.sleep(0.2)  # poll interval while it starts


def test_confluent_framed_records_are_sealed_and_ids_survive_a_restart(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = kafka.settings.model_copy(
        update={"home": tmp_path / "home", "schema_registry_url": url}
    )
    processes = [start_registry(settings, port, tmp_path / "registry.log")]
    try:
        app, raw = unique("reg"), unique("reg-raw")
        TopicAdmin(settings).create_topic(raw, 1)
        route = {"topic": raw, "app": app, "stream": "votes", "schema": "leaderboard.Vote",
                 "format": "confluent", "batch_id_header": "batch",
                 "seal_after_ms": 50}  # fmt: skip
        name = unique("seq")
        config = write_config(tmp_path / "sequencer.toml", name, [route])
        sequencer = SequencerProcess(settings, config, tmp_path / "sequencer.log")
        processes.append(sequencer)
        client = SchemaRegistryClient({"url": url})
        subject = f"{raw}-value"
        wait_until(lambda: subject in client.get_subjects(), 60, sequencer.alive, subject)

        vote = SchemaRegistry(settings.schema_dir).get("leaderboard.Vote")
        serialize = AvroSerializer(client, json.dumps(to_avsc(vote)))
        producer = Producer(idempotent_producer_config(settings))
        where = SerializationContext(raw, MessageField.VALUE)
        for n, v in enumerate(VOTES, start=1):
            producer.produce(raw, serialize(v, where), headers=[("batch", str(n))])
        producer.produce(raw, frame(999, b"\x02"), headers=[("batch", "99")])
        assert producer.flush(30) == 0
        schema_id = client.get_latest_version(subject).schema_id
        assert schema_id is not None

        def sealed() -> list[dict[str, object]]:
            return [t for b in read_batches(settings, app, "votes", "leaderboard.Vote")
                    for t in b.tuples]  # fmt: skip

        wait_until(lambda: len(sealed()) == len(VOTES), 60, sequencer.alive, "sealed votes")
        assert sealed() == VOTES
        dead_letters = f"txstream-sequencer-{name}.dead_letters"

        def unknown_id() -> bool:
            return any(
                "schema id 999" in d["error"] for d in read_dead_letters(settings, dead_letters)
            )

        wait_until(unknown_id, 60, sequencer.alive, "the dead letter of schema id 999")

        # a producer's schema the subject's level (BACKWARD) refuses: a new required field
        wider = to_avsc(vote)
        wider["fields"].append({"name": "channel", "type": "string"})
        with pytest.raises(SchemaRegistryError) as refused:
            client.register_schema(subject, Schema(json.dumps(wider), "AVRO"))
        assert refused.value.http_status_code == 409

        processes[0].kill()  # SIGKILL
        processes[0] = start_registry(settings, port, tmp_path / "registry.log")
        fresh = SchemaRegistryClient({"url": url})
        assert fresh.get_schema(schema_id).schema_str == client.get_schema(schema_id).schema_str
        assert fresh.get_latest_version(subject).schema_id == schema_id

        # a second registry on the same topic fences the first: its next write is refused
        # and it stops, so two never hand out one id for different schemas
        port2 = free_port()
        second = settings.model_copy(update={"schema_registry_url": f"http://127.0.0.1:{port2}"})
        processes.append(start_registry(second, port2, tmp_path / "registry2.log"))
        body = json.dumps({"schema": json.dumps(to_avsc(vote))}).encode()
        status, answer = http(f"{url}/subjects/other-value/versions", body)
        assert (status, answer["error_code"]) == (503, 50003), answer
        assert processes[0].wait_exit(30) == 1
        other = SchemaRegistryClient({"url": second.schema_registry_url})
        assert (
            other.register_schema("other-value", Schema(json.dumps(to_avsc(vote)), "AVRO"))
            == schema_id
        )
    finally:
        for proc in processes:
            proc.kill()
