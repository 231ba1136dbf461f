"""Worker slots against the real broker: two workers never share a static member id.

A slot names a worker's static membership in the consumer group. Two live workers in one
slot fence each other in the group and open the same partition stores, so a second worker
started without `--instance-id` takes the next free slot, and one started in a held slot
refuses to run.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from leaderboard.dataflow import Params
from tests.conftest import KafkaEnv
from tests.integration.leaderboard_driver import new_app
from tests.service_process import ServiceProcess
from txstream.config import Settings
from txstream.model.app import App

PARAMS = Params(contestants=12, threshold=1000, window=100, slide=1)
SLOT_LINE = re.compile(r"worker slot (\S+) of app")


def worker(settings: Settings, app: App, log: Path, *extra: str) -> ServiceProcess:
    params = json.dumps({**asdict(PARAMS), "name": app.name})
    args = ["worker", "run", "--app", "leaderboard.dataflow:from_params", "--params", params]
    return ServiceProcess(settings, [*args, "--no-metrics", *extra], log)


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


@pytest.fixture
def started() -> Iterator[list[ServiceProcess]]:
    procs: list[ServiceProcess] = []
    yield procs
    for p in procs:
        p.kill()


def wait_for(condition: object, what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def slot_of(log: Path) -> str | None:
    found = SLOT_LINE.search(log.read_text(errors="replace")) if log.exists() else None
    return found.group(1) if found else None


def member_ids(settings: Settings, app: App) -> list[str]:
    """The group's static member ids; none while its coordinator is still being elected."""
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    group = f"txstream-{app.name}"
    try:
        described = admin.describe_consumer_groups([group])[group].result(30)
    except KafkaException:
        return []
    return sorted(m.group_instance_id or "" for m in described.members)


def test_a_second_worker_without_an_id_takes_the_next_free_slot(
    settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    app = new_app(PARAMS)
    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    for log in logs:
        started.append(worker(settings, app, log))

    def two_members() -> bool:
        return len(member_ids(settings, app)) == 2

    wait_for(two_members, "two members in the consumer group", timeout_s=60)
    slots = [slot_of(log) for log in logs]
    assert None not in slots and slots[0] != slots[1], slots
    assert member_ids(settings, app) == sorted(f"{app.name}-{s}" for s in slots)
    assert all(p.alive() for p in started), [log.read_text()[-2000:] for log in logs]


def test_a_worker_in_a_held_slot_refuses_to_run(
    settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    app = new_app(PARAMS)
    first_log, second_log = tmp_path / "w1.log", tmp_path / "w2.log"
    first = worker(settings, app, first_log, "--instance-id", "a")
    started.append(first)
    wait_for(lambda: slot_of(first_log) == "a", "the first worker's slot line")
    second = worker(settings, app, second_log, "--instance-id", "a")
    started.append(second)
    assert second.wait_exit(60) == 2, second_log.read_text()[-2000:]
    said = second_log.read_text()
    assert f"worker slot 'a' of app '{app.name}' is held by pid {first.proc.pid}" in said, said
    assert first.alive()
