"""A TopicAdmin keeps working across a partition leader change (here a broker restart).

librdkafka's admin client asks for offsets with the leader epoch it cached, and after a
leader change it kept getting FENCED_LEADER_EPOCH until its metadata refresh (5 min): a
standby coordinator could not take over for minutes after a broker restart.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.kafka_env import private_settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.stack.broker import KafkaBroker

pytestmark = pytest.mark.kafka


def test_offsets_are_listed_again_after_the_leader_changed(tmp_path: Path) -> None:
    settings = private_settings(tmp_path / "home")
    broker = KafkaBroker(settings)
    broker.start()
    try:
        admin = TopicAdmin(settings)
        admin.create_topic("t", 1)
        assert admin.start_offset("t", 0) == 0
        broker.process.stop()
        broker.start()  # the partition's leader epoch moves on
        deadline, errors = time.monotonic() + 30, []
        while time.monotonic() < deadline:
            try:
                assert admin.start_offset("t", 0) == 0
                break
            except KafkaAdminError as e:  # no leader yet, for a moment after the start
                errors.append(str(e))
                time.sleep(0.5)  # the next attempt, as the coordinator's next step makes it
        else:
            pytest.fail(f"no offsets within 30 s of the restart: {errors[-3:]}")
    finally:
        broker.process.stop()
