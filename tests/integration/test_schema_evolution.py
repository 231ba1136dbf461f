"""Schema evolution into the warehouse, both ways, on the broker and Spark.

The sales app's worker publishes its streams' schemas and marks every output record with
its writer schema; its warehouse is loaded. Then `orders.ItemTotal` gains an optional field:
records of both versions follow (a rolling upgrade: one engine still on the old schema), the
warehouse file is described again, and the next load adds the column, reading each record
with the schema it was written with. A later incompatible change (a field's type) is refused
before anything is written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from deltalake import DeltaTable

from tests.integration.test_generic_warehouse import TXSTREAM, Loaded, rows, sales
from tests.support.kafka_env import KafkaEnv
from txstream.config import project_root
from txstream.kafka.clients import common_config, send, transactional_producer_config
from txstream.kafka.published_schemas import publish, published
from txstream.kafka.topics import AppTopics
from txstream.schemas.codec import WRITER_HEADER, BatchCodec
from txstream.schemas.registry import SchemaRegistry

pytestmark = [pytest.mark.spark, pytest.mark.faults]

STREAM = "item_totals"


def item_total(schema_dir: Path, **extra_fields: Any) -> Path:
    """A copy of the project's schemas with `orders.ItemTotal`'s fields changed."""
    shutil.copytree(project_root() / "schemas", schema_dir)
    path = schema_dir / "orders" / "ItemTotal.avsc"
    doc = json.loads(path.read_text())
    fields = {f["name"]: f for f in doc["fields"]}
    doc["fields"] = list((fields | extra_fields).values())
    path.write_text(json.dumps(doc))
    return schema_dir


def codec(schema_dir: Path) -> BatchCodec:
    return BatchCodec(SchemaRegistry(schema_dir).get("orders.ItemTotal"))


def described(s: Loaded, schema_dir: Path, path: Path) -> Path:
    env = {**s.env, "TXSTREAM_SCHEMA_DIR": str(schema_dir)}
    out = subprocess.run(
        [TXSTREAM, "describe", "--app", "orders.sales:from_params", "--format", "warehouse"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    path.write_text(out.stdout)
    return path


def etl(s: Loaded, schema_dir: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TXSTREAM, "etl", "run", "--once", "--no-metrics", "--app", s.app, "--config", str(config)],
        env={**s.env, "TXSTREAM_SCHEMA_DIR": str(schema_dir)},
        capture_output=True, text=True, timeout=500, check=False,
    )  # fmt: skip


def first_header(kafka: KafkaEnv, topic: str) -> bytes | None:
    config = {"group.id": "evolution-test", "isolation.level": "read_committed",
              "enable.auto.commit": False}  # fmt: skip
    consumer = Consumer({**common_config(kafka.settings), **config})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None, msg
        found = dict(msg.headers() or []).get(WRITER_HEADER)
        return found.encode() if isinstance(found, str) else found
    finally:
        consumer.close()


@pytest.mark.slow  # four Spark runs (~2 min): runs in make faults
@pytest.mark.timeout(900)
def test_a_new_optional_field_flows_in_and_an_incompatible_change_is_refused(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    s = sales(kafka, tmp_path)  # the real worker, on the project's schemas
    settings = kafka.settings
    topics = AppTopics(s.app)
    v1 = codec(project_root() / "schemas")
    assert (STREAM, v1.fingerprint) in {
        (p.stream, p.fingerprint) for p in published(settings, topics)
    }
    assert first_header(kafka, topics.stream(STREAM)) == v1.fingerprint.encode()
    loaded = etl(s, project_root() / "schemas", s.config)
    assert loaded.returncode == 0, loaded.stdout[-3000:] + loaded.stderr[-3000:]
    root = tmp_path / "wh" / s.app
    before = rows(root, STREAM)
    assert len(before) == len(s.totals)

    # The upgrade: a new optional field; one engine writes the new version, one the old.
    schemas_v2 = item_total(
        tmp_path / "schemas-v2",
        region={"name": "region", "type": ["null", "string"], "default": None},
    )
    v2 = codec(schemas_v2)
    publish(settings, topics, {STREAM: v2})
    producer = Producer(transactional_producer_config(settings, f"evolution-{s.app}"))
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(3):
        old = v1.encode(STREAM, 9_000 + n, [{"seq": 900 + n, "item": 1, "orders": 1, "units": 1}])
        send(producer, topics.stream(STREAM), old, partition=0, headers=v1.headers)
        tuples = [{"seq": 950 + n, "item": 2, "orders": 1, "units": 2, "region": f"r{n}"}]
        new = v2.encode(STREAM, 9_500 + n, tuples)
        send(producer, topics.stream(STREAM), new, partition=1, headers=v2.headers)
    producer.commit_transaction(30)
    config_v2 = described(s, schemas_v2, tmp_path / "sales-v2.toml")
    assert "region STRING" in config_v2.read_text()
    evolved = etl(s, schemas_v2, config_v2)
    assert evolved.returncode == 0, evolved.stdout[-3000:] + evolved.stderr[-3000:]
    after = {r["tuple_seq"]: r for r in rows(root, STREAM)}
    assert len(after) == len(s.totals) + 6
    assert {after[950 + n]["region"] for n in range(3)} == {"r0", "r1", "r2"}
    assert all(after[900 + n]["region"] is None for n in range(3))  # read as written: v1
    assert all(after[r["tuple_seq"]]["region"] is None for r in before)
    assert rows(root, "quarantine") == []

    # An incompatible change: a field's type. Refused before any write, naming the stream.
    schemas_v3 = item_total(tmp_path / "schemas-v3", units={"name": "units", "type": "string"})
    config_v3 = described(s, schemas_v3, tmp_path / "sales-v3.toml")
    versions = {p.name: DeltaTable(str(p)).version() for p in root.iterdir() if p.name[0] != "_"}
    refused = etl(s, schemas_v3, config_v3)
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    said = " ".join((refused.stdout + refused.stderr).split())
    assert "refusing the schema change, nothing was written" in said, said[-3000:]
    assert f"stream '{STREAM}'" in said and v1.fingerprint in said, said[-3000:]
    assert versions == {
        p.name: DeltaTable(str(p)).version() for p in root.iterdir() if p.name[0] != "_"
    }
