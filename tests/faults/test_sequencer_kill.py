"""The supervised sequencer, SIGKILLed at random moments while events stream in.

No batch may be lost or duplicated, and per border partition the batch ids must rise.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.kafka_env import KafkaEnv
from tests.support.killer import Killer
from tests.support.scale import cases, scaled
from tests.support.sequencer_checks import SCHEMA, check_exactly_once, wait_all_sealed
from tests.support.sequencer_driver import produce_events, unique, write_config
from txstream.config import Settings, project_root
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.stack.supervisor import Policy, Supervised

BATCHES, PER_BATCH, LANES = scaled(2500, 5000), 4, 2
KILLS, CHUNKS = scaled(4, 6), scaled(50, 100)


def events(with_ids: bool) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = [
        {"vote_id": i, "phone_number": 2_000_000 + i, "contestant_number": i % 5 + 1}
        for i in range(BATCHES * PER_BATCH)
    ]
    if with_ids:
        for e in sent:
            e["batch_id"] = e["vote_id"] // PER_BATCH + 1
    return sent


@pytest.mark.timeout(600)
@pytest.mark.slow  # a sequencer killed mid-stream (~50 s): runs in make faults
@pytest.mark.parametrize("ids", cases(["client"], ["client", "policy"]))
def test_sigkilled_sequencer_loses_and_duplicates_nothing(
    kafka: KafkaEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids: str
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TXSTREAM_HOME", str(home))
    monkeypatch.setenv("TXSTREAM_KAFKA_BOOTSTRAP", kafka.bootstrap)
    settings = Settings()
    admin = TopicAdmin(settings)
    raw, app, name = unique("raw"), unique("seqapp"), unique("seq")
    admin.create_topic(raw, 1)
    admin.create_topic(AppTopics(app).stream("votes"), LANES)
    route: dict[str, Any] = {"topic": raw, "app": app, "stream": "votes", "schema": SCHEMA,
                             "key_field": "contestant_number"}  # fmt: skip
    if ids == "client":  # batch ids from the events; else the sequencer numbers batches
        route |= {"batch_id_field": "batch_id", "seal_after_ms": 100}
    else:
        route |= {"policy_events": 7, "policy_ms": 1000}  # partial batches outlive commits
    config = write_config(tmp_path / f"{name}.toml", name, [route])
    txstream = str(project_root() / ".venv" / "bin" / "txstream")
    sequencer = Supervised(
        "sequencer",
        [txstream, "sequencer", "run", "--config", str(config)],
        settings,
        policy=Policy(max_restarts=50, window_s=60.0, backoff_max_ms=1000),
    )
    sent = events(with_ids=ids == "client")
    killer = Killer(home / "run" / "sequencer.pid", "sequencer run", kills=KILLS, seed=23,
                    log=home / "log" / "sequencer.log", ready="resuming")  # fmt: skip

    def stream_in() -> None:  # chunks 0.25 s apart, so the kills land mid-stream
        chunk = len(sent) // CHUNKS
        for start in range(0, len(sent), chunk):
            produce_events(settings, raw, sent[start : start + chunk])
            killer.done.wait(0.25)

    producer = threading.Thread(target=stream_in, daemon=True)
    sequencer.start()
    try:
        killer.start()
        producer.start()
        producer.join(120)
        killer.join(120)
        wait_all_sealed(settings, app, sequencer, sent)
        restarts = sequencer.restarts()
    finally:
        killer.done.set()
        sequencer.stop()
    assert len(killer.killed) >= KILLS - 1, f"only {len(killer.killed)} kills landed"
    assert restarts >= len(killer.killed)

    check_exactly_once(
        settings, app, name, len(sent), LANES, PER_BATCH if ids == "client" else None
    )
