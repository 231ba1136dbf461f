"""The supervised sequencer on a three-broker cluster while brokers and it are killed.

Brokers are SIGKILLed (and started again on their data) or SIGSTOPped for a few seconds,
and the sequencer is SIGKILLed once it has resumed, while raw events stream in
throughout. Every event must be sealed into exactly one batch, and per border partition
the batch ids must rise.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.chaos import Chaos, sigkill
from tests.support.kafka_env import cluster_settings
from tests.support.scale import scaled, seeds
from tests.support.sequencer_checks import SCHEMA, check_exactly_once, wait_all_sealed
from tests.support.sequencer_driver import produce_events, unique, write_config
from txstream.config import Settings, project_root
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics
from txstream.stack.cluster import KafkaCluster
from txstream.stack.supervisor import Policy, Supervised

pytestmark = pytest.mark.kafka

KILLS = scaled(2, 5)  # of each kind: broker SIGKILL, broker SIGSTOP, sequencer SIGKILL
BATCHES, PER_BATCH, LANES, CHUNKS = 5000, 4, 2, 200


class SequencerChaos(Chaos):
    def __init__(self, settings: Settings, sequencer: Supervised, seed: int) -> None:
        kinds = ("broker-kill", "broker-stop", "sequencer-kill")
        super().__init__(settings, seed, dict.fromkeys(kinds, KILLS))
        self.sequencer = sequencer
        self.log = settings.home / "log" / "sequencer.log"

    def sequencer_kill(self) -> None:
        """Kill it once it has resumed (its input assigned), then wait for it to resume."""
        self.wait(lambda: self.sequencer.child.live_pid() is not None, "the sequencer to run")
        resumed = self.resumes()
        sigkill(self.sequencer.child.live_pid(), "the sequencer")
        self.wait(lambda: self.resumes() > resumed, "the sequencer to resume")

    def resumes(self) -> int:
        return self.log.read_text(errors="replace").count("resuming") if self.log.exists() else 0


@pytest.mark.slow  # three brokers and ~15 faults: runs in make faults
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds([23], [23]))
def test_sequencer_loses_and_duplicates_nothing_on_a_three_broker_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    settings = cluster_settings(tmp_path / "home")
    # the supervised sequencer inherits the environment: point it at this private cluster
    monkeypatch.setenv("TXSTREAM_HOME", str(settings.home))
    monkeypatch.setenv("TXSTREAM_KAFKA_BOOTSTRAP", settings.bootstrap_servers)
    cluster = KafkaCluster(settings)
    cluster.start(lambda _: None)
    try:
        admin = TopicAdmin(settings)
        raw, app, name = unique("raw"), unique("seqapp"), unique("seq")
        admin.create_topic(raw, 1)
        admin.create_topic(AppTopics(app).stream("votes"), LANES)
        route: dict[str, Any] = {
            "topic": raw,
            "app": app,
            "stream": "votes",
            "schema": SCHEMA,
            "key_field": "contestant_number",
            "batch_id_field": "batch_id",
            "seal_after_ms": 100,
        }
        config = write_config(tmp_path / f"{name}.toml", name, [route])
        txstream = str(project_root() / ".venv" / "bin" / "txstream")
        sequencer = Supervised(
            "sequencer",
            [txstream, "sequencer", "run", "--config", str(config)],
            settings,
            policy=Policy(max_restarts=50, window_s=60.0, backoff_max_ms=1000),
        )
        sent = [
            {
                "vote_id": i,
                "phone_number": 2_000_000 + i,
                "contestant_number": i % 5 + 1,
                "batch_id": i // PER_BATCH + 1,
            }
            for i in range(BATCHES * PER_BATCH)
        ]
        chaos = SequencerChaos(settings, sequencer, seed)
        chaos_over = threading.Event()

        def stream_in() -> None:  # paced while the faults run, then the rest at once
            chunk = len(sent) // CHUNKS
            for start in range(0, len(sent), chunk):
                produce_events(settings, raw, sent[start : start + chunk])
                chaos_over.wait(1.0)

        producer = threading.Thread(target=stream_in, daemon=True)
        sequencer.start()
        try:
            producer.start()
            try:
                chaos.run(chaos_over)
            finally:
                chaos_over.set()
            producer.join(300)
            assert not producer.is_alive(), "the events were not all sent"
            wait_all_sealed(settings, app, sequencer, sent)
            restarts = sequencer.restarts()
        finally:
            chaos_over.set()
            sequencer.stop()
        assert chaos.done.count("sequencer-kill") == KILLS, chaos.done
        assert len(chaos.done) == 3 * KILLS, chaos.done
        assert restarts >= KILLS

        check_exactly_once(settings, app, name, len(sent), LANES, PER_BATCH)
    finally:
        cluster.stop(lambda _: None)
