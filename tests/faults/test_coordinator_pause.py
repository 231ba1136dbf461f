"""A coordinator frozen (SIGSTOP) with decisions in hand, about to commit them, past its
group session: the standby takes over, and the frozen one, woken, is a zombie.

It must not get those decisions through: the standby's `init_transactions` under the
shared transactional.id fenced its producer, so the commit it wakes into fails and it
stands by. Money is conserved, no transaction is decided twice or two ways, and the woken
process stays up as a standby while the transfers go on. (The `stop` failpoint freezes it
at that exact step: a SIGSTOP sent from outside lands anywhere, and the woken process
mostly learns from its group, before any commit, that it lost the role.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_coordinator_standby import (
    WAIT_S,
    Load,
    money,
    poll,
    serve_with_standby,
)
from tests.support.bank_cluster import BankCluster, assert_each_decided_once, wait_for_text
from tests.support.kafka_env import KafkaEnv

pytestmark = pytest.mark.kafka

FREEZE_AT = 20  # the 20th of the first coordinator's transactions that carry decisions


@pytest.mark.slow  # a coordinator frozen past its session (~30 s): make faults
def test_a_coordinator_frozen_before_a_decision_wakes_fenced(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    cluster = BankCluster(kafka.settings, tmp_path)
    try:
        cluster.worker()
        first = cluster.coordinator(
            f"coordinator.before_decision=stop@{FREEZE_AT}", log="coordinator-1.log"
        )
        with cluster.client(timeout_s=30) as client:
            second, pairs = serve_with_standby(cluster, client)
            before = money(cluster, client)

            load = Load(cluster, pairs)
            try:
                poll(first.stopped, "the first coordinator to freeze before a decision")
                try:
                    wait_for_text(second.log, "took over", WAIT_S)
                    frozen = load.committed()
                    poll(lambda: load.committed() >= frozen + 5, "transfers after the takeover")
                finally:
                    first.resume()
                wait_for_text(first.log, "standing by: ", WAIT_S)
                woken = load.committed()
                poll(lambda: load.committed() >= woken + 5, "transfers after the zombie woke")
            finally:
                load.join()
            assert first.alive(), "the woken coordinator died instead of standing by"
            assert money(cluster, client) == before, "money was made or lost"
        assert_each_decided_once(cluster)
        woke = first.log.read_text()
        assert "standing by: cannot commit" in woke, "the zombie's commit was not refused"
    finally:
        cluster.stop_all()
