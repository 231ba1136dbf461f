"""2PC failure cases on the real broker, each with real processes SIGKILLed at failpoints.

Every case ends with the same checks: the client's outcome matches the balances (the
transfer applied exactly once, or not at all), money is conserved, and the participants
are unblocked (a later transfer over the same accounts commits).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.conftest import KafkaEnv
from tests.integration.bank_cluster import BankCluster, wait_for_text
from tests.service_process import ServiceProcess
from txstream.oltp.client import TxClient, fragment
from txstream.oltp.messages import Fragment

pytestmark = pytest.mark.integration

KILLED = -signal.SIGKILL


@pytest.fixture(scope="module")
def cluster(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BankCluster]:
    c = BankCluster(kafka.settings, tmp_path_factory.mktemp("bank2pc"))
    c.worker()
    try:
        yield c
    finally:
        c.stop_all()


@pytest.fixture
def coordinator(cluster: BankCluster) -> Iterator[list[ServiceProcess]]:
    """The test's coordinator incarnations; whichever is alive at the end is stopped."""
    procs: list[ServiceProcess] = []
    yield procs
    for p in procs:
        if p.alive():
            p.terminate()


def transfer_fragments(a: int, b: int, amount: int) -> list[Fragment]:
    return [
        fragment(a, "debit", account=a, amount=amount),
        fragment(b, "credit", account=b, amount=amount),
    ]


def unblocked(cluster: BankCluster, client: TxClient, a: int, b: int) -> None:
    before = cluster.balance(client, a), cluster.balance(client, b)
    r = cluster.transfer(client, a, b, 1)
    assert r.ok, f"participants still blocked: {r}"
    assert (cluster.balance(client, a), cluster.balance(client, b)) == (
        before[0] - 1,
        before[1] + 1,
    )


def test_coordinator_crash_after_prepare_aborts_on_restart(
    cluster: BankCluster, coordinator: list[ServiceProcess]
) -> None:
    coordinator.append(cluster.coordinator("coordinator.after_prepare=kill"))
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)  # single-partition: no 2PC, no failpoint
        pending = client.submit(transfer_fragments(a, b, 30))
        assert coordinator[0].wait_exit(60) == KILLED
        coordinator.append(cluster.coordinator())
        result = client.wait(pending)
        assert (result.status, result.reason) == ("aborted", "coordinator_restart")
        assert (cluster.balance(client, a), cluster.balance(client, b)) == (100, 100)
        wait_for_text(coordinator[1].log, "1 in doubt", 30)
        unblocked(cluster, client, a, b)


def test_coordinator_crash_after_decision_commits_on_restart(
    cluster: BankCluster, coordinator: list[ServiceProcess]
) -> None:
    coordinator.append(cluster.coordinator("coordinator.after_decision=kill"))
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)
        result = cluster.transfer(client, a, b, 30)
        assert result.ok, result  # the decision, and the client's result, are logged
        assert coordinator[0].wait_exit(60) == KILLED  # before any COMMIT was sent
        coordinator.append(cluster.coordinator())
        wait_for_text(coordinator[1].log, "1 in doubt", 30)
        assert (cluster.balance(client, a), cluster.balance(client, b)) == (70, 130)
        unblocked(cluster, client, a, b)


def test_participant_crash_after_vote_is_resolved(
    cluster: BankCluster, coordinator: list[ServiceProcess]
) -> None:
    coordinator.append(cluster.coordinator())
    with cluster.client(timeout_s=60) as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)
        worker = cluster.processes[0]
        worker.terminate()
        crashing = cluster.worker("engine.after_vote=kill")
        pending = client.submit(transfer_fragments(a, b, 30), timeout_s=60)
        assert crashing.wait_exit(120) == KILLED
        restarted = cluster.worker()
        cluster.processes[0] = restarted
        wait_for_text(restarted.log, "holds prepared transactions", 120)
        result = client.wait(pending, 60)
        expected = (70, 130) if result.ok else (100, 100)
        assert (cluster.balance(client, a), cluster.balance(client, b)) == expected
        unblocked(cluster, client, a, b)


def test_lost_prepare_times_out_and_aborts(
    cluster: BankCluster, coordinator: list[ServiceProcess]
) -> None:
    coordinator.append(cluster.coordinator("coordinator.drop_prepare=drop"))
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)
        result = cluster.transfer(client, a, b, 30, timeout_s=3)
        assert (result.status, result.reason) == ("aborted", "timeout")
        assert "no vote from partitions" in result.detail
        assert (cluster.balance(client, a), cluster.balance(client, b)) == (100, 100)
        unblocked(cluster, client, a, b)


def test_lost_decision_is_resent(cluster: BankCluster, coordinator: list[ServiceProcess]) -> None:
    coordinator.append(cluster.coordinator("coordinator.drop_decision=drop"))
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)
        assert cluster.transfer(client, a, b, 30).ok
        # One participant never got its COMMIT: it holds its rows until the coordinator
        # resends the decision (or answers its inquiry); reads of its rows wait for that.
        assert (cluster.balance(client, a), cluster.balance(client, b)) == (70, 130)
        wait_for_text(coordinator[0].log, "failpoint: dropping the decision", 5)
        unblocked(cluster, client, a, b)
