"""`txstream orders run` end to end on the real broker: the order pipeline's result equals
its serial reference for several partition, worker and batch-size choices."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orders.files import Shop
from orders.gen import generate
from orders.reference import run as reference
from tests.support.kafka_env import KafkaEnv
from tests.support.scale import cases
from txstream.config import project_root
from txstream.kafka.admin import TopicAdmin

pytestmark = pytest.mark.faults

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")


def orders_run(
    kafka: KafkaEnv, data: Path, home: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TXSTREAM_HOME": str(home), "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap}
    return subprocess.run(
        [TXSTREAM, "orders", "run", "--items", str(data / "items.txt"),
         "--customers", str(data / "customers.txt"), "--events", str(data / "events.txt"),
         "--result", str(data / "result.json"), "--timeout-s", "240", *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def expected(data: Path) -> dict[str, object]:
    shop = Shop.read(data / "items.txt", data / "customers.txt", data / "events.txt")
    return reference(shop).to_json()


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("partitions", "workers", "batch_size"), cases([(4, 2, 3)], [(4, 2, 3), (2, 1, 50), (8, 3, 1)])
)
def test_orders_run_equals_the_serial_reference(
    kafka: KafkaEnv, tmp_path: Path, partitions: int, workers: int, batch_size: int
) -> None:
    generate(items=12, customers=30, events=600, seed=partitions, out=tmp_path)
    run = orders_run(kafka, tmp_path, tmp_path / "home", "--partitions", str(partitions),
                     "--workers", str(workers), "--batch-size", str(batch_size))  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"600 events ({-(-600 // batch_size)} batches of up to {batch_size})" in run.stdout
    got = json.loads((tmp_path / "result.json").read_text())
    want = expected(tmp_path)
    assert {k: got[k] for k in want} == want
    assert got["confirmed"] > 0 and got["cancelled"]["insufficient_funds"] > 0


def test_a_bad_line_stops_the_run_before_anything_is_loaded(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    generate(items=3, customers=3, events=20, seed=1, out=tmp_path)
    with (tmp_path / "events.txt").open("a") as f:
        f.write("O 99 1 1\n")
    before = set(TopicAdmin(kafka.settings).list_topics())
    run = orders_run(kafka, tmp_path, tmp_path / "home")
    assert run.returncode == 2
    assert f"{tmp_path / 'events.txt'}:21: expected 4 fields" in run.stderr
    assert "nothing was loaded" in run.stderr
    assert not (tmp_path / "result.json").exists()
    assert set(TopicAdmin(kafka.settings).list_topics()) == before
