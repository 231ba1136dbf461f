"""Where a worker runs on its host, against the real broker: its slot and its CPUs.

A slot names a worker's static membership in the consumer group. Two live workers in one
slot fence each other in the group and open the same partition stores, so a second worker
started without `--instance-id` takes the next free slot, and one started in a held slot
refuses to run.

`worker_cpus` keeps a worker and every thread it starts to a CPU set. A thread started
before the worker pins itself would keep every CPU; the consumer's, librdkafka's, the
task's and the commit's threads start later, once it serves its partition, so the check
runs once its reference data is committed.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from leaderboard.commits import wait_for_batches
from leaderboard.dataflow import Params
from leaderboard.loader import Loader
from tests.support.kafka_env import KafkaEnv
from tests.support.leaderboard_driver import new_app
from tests.support.proc_cpus import thread_cpu_lists
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.topics import AppTopics
from txstream.model.app import App

PARAMS = Params(contestants=12, threshold=1000, window=100, slide=1)
SLOT_LINE = re.compile(r"worker slot (\S+) of app")


def worker(
    settings: Settings, app: App, log: Path, *extra: str, cpus: str | None = None
) -> ServiceProcess:
    params = json.dumps({**asdict(PARAMS), "name": app.name})
    args = ["worker", "run", "--app", "leaderboard.dataflow:from_params", "--params", params]
    env = None if cpus is None else {"TXSTREAM_WORKER_CPUS": cpus}
    return ServiceProcess(settings, [*args, "--no-metrics", *extra], log, extra_env=env)


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


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: every set is all of them")
def test_a_worker_and_all_its_threads_run_on_worker_cpus(
    settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    cpu = max(os.sched_getaffinity(0))
    app = new_app(PARAMS)
    log = tmp_path / "worker.log"
    proc = worker(settings, app, log, cpus=str(cpu))
    started.append(proc)
    Loader(settings, app).load_reference_data()

    def alive() -> bool:
        return proc.alive()

    # its reference data committed: the task and commit threads run
    wait_for_batches(settings, AppTopics(app.name).commits, {"contestant_rows": 1}, 120, alive)
    lists = thread_cpu_lists(proc.proc.pid)
    assert len(lists) > 5, lists  # the threads started while it serves
    assert set(lists.values()) == {str(cpu)}, (lists, log.read_text()[-2000:])


def test_a_worker_given_cpus_it_may_not_use_refuses_to_run(
    settings: Settings, tmp_path: Path, started: list[ServiceProcess]
) -> None:
    beyond = max(os.sched_getaffinity(0)) + 1000
    log = tmp_path / "worker.log"
    proc = worker(settings, new_app(PARAMS), log, cpus=f"0,{beyond}")
    started.append(proc)
    assert proc.wait_exit(60) == 2, log.read_text()[-2000:]
    said = log.read_text()
    assert f"error: worker_cpus: CPU {beyond} is not available here" in said, said
