"""2PC failure cases on the real broker, each with real processes SIGKILLed at failpoints.

Every case ends with the same checks: the client's outcome matches the balances (the
transfer applied exactly once, or not at all), money is conserved, and the participants
are unblocked (a later transfer over the same accounts commits).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bank.dataflow import from_params
from tests.support.bank_cluster import BankCluster, wait_for_text
from tests.support.http_json import http, wait_listening
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.service_process import TXSTREAM, ServiceProcess
from txstream.client import TxClient, fragment
from txstream.oltp.messages import Fragment
from txstream.stack.prometheus import PrometheusServer
from txstream.testing.verify import verify

pytestmark = pytest.mark.kafka

KILLED = -signal.SIGKILL


@pytest.fixture(scope="module")
def cluster(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BankCluster]:
    home = tmp_path_factory.mktemp("bank2pc")
    # a private Prometheus port: the OpenAPI test runs one there for the console's routes
    settings = kafka.settings.model_copy(
        update={"home": home / "home", "prometheus_port": free_port()}
    )
    c = BankCluster(settings, home)
    c.worker_metrics = free_port()
    c.worker(metrics_port=c.worker_metrics)
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
        assert coordinator[0].wait_exit(60) == KILLED  # before any participant acknowledged
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


def test_http_endpoint_and_cli(cluster: BankCluster, coordinator: list[ServiceProcess]) -> None:
    """The same transactions and queries through HTTP and `txstream call/query`."""
    port = free_port()
    coordinator.append(cluster.coordinator(http_port=port))
    base = f"http://127.0.0.1:{port}"
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)
    wait_listening(port)  # the accounts opened without the coordinator: its endpoint may lag
    body = {
        "fragments": [
            {"key": a, "procedure": "debit", "params": {"account": a, "amount": 5}},
            {"key": b, "procedure": "credit", "params": {"account": b, "amount": 5}},
        ]
    }
    status, reply = http(f"{base}/transactions", json.dumps(body).encode())
    assert (status, reply["status"], reply["results"]) == (200, "committed", [95, 105])
    status, reply = http(f"{base}/tables/accounts?key=[{a}]")  # snapshot: waits for 2PC
    assert (status, reply["rows"]) == (200, [[[a], {"balance": 95}]])
    status, reply = http(f"{base}/tables/accounts?key=[{b}]&isolation=read_committed")
    assert (status, reply["rows"]) == (200, [[[b], {"balance": 105}]])
    nope = {"fragments": [{"key": a, "procedure": "nope"}]}
    status, reply = http(f"{base}/transactions", json.dumps(nope).encode())
    assert status == 400 and "no transaction 'nope'" in reply["detail"]
    status, reply = http(f"{base}/tables/accounts?where=balance<<1")
    assert status == 400 and "balance<<1" in reply["error"]

    env = {
        **os.environ,
        "TXSTREAM_HOME": str(cluster.settings.home),
        "TXSTREAM_KAFKA_BOOTSTRAP": cluster.settings.bootstrap_servers,
    }
    overdraw = subprocess.run(
        [
            TXSTREAM,
            "call",
            "--app",
            cluster.name,
            "--procedure",
            "debit",
            "--key",
            str(a),
            "--params",
            json.dumps({"account": a, "amount": 1000}),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert overdraw.returncode == 1, overdraw.stderr
    outcome = json.loads(overdraw.stdout)
    assert (outcome["status"], outcome["reason"]) == ("aborted", "constraint_violation")
    assert f"accounts[{a}] violates balance >= 0" in outcome["detail"]
    rows = subprocess.run(
        [
            TXSTREAM,
            "query",
            "--app",
            cluster.name,
            "--table",
            "accounts",
            "--where",
            f"balance>{100}",
            "--agg",
            "count",
            "--agg",
            "max:balance",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    totals = json.loads(rows.stdout)["row"]
    assert totals["max_balance"] >= 105 and totals["count"] >= 1


def test_the_http_endpoint_keeps_to_its_openapi_document(
    cluster: BankCluster, coordinator: list[ServiceProcess], tmp_path: Path
) -> None:
    """schemathesis derives requests, valid and invalid, from the served OpenAPI document
    and checks every answer: no server error, status codes, content types and bodies as
    documented, invalid input refused. A transaction that fails for a business reason (no
    such procedure, say) is a documented 400, so "positive data acceptance" is left out."""
    port = free_port()
    prometheus = PrometheusServer(cluster.settings)  # the console's routes ask it
    prometheus.start()
    try:
        coordinator.append(cluster.coordinator(http_port=port))
        with cluster.client() as client:
            a, b = cluster.accounts_apart()
            cluster.open(client, a, b)
        wait_listening(port)
        run = schemathesis(port, tmp_path)
    finally:
        prometheus.process.stop()
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


def schemathesis(port: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(TXSTREAM).with_name("schemathesis")),
            "run",
            f"http://127.0.0.1:{port}/openapi.json",
            "--checks", "all",
            "--exclude-checks", "positive_data_acceptance",
            "--max-examples", "15",
            "--request-timeout", "60",
            "--seed", "7",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip


def test_metrics_count_what_ran(cluster: BankCluster, coordinator: list[ServiceProcess]) -> None:
    port = free_port()
    coordinator.append(cluster.coordinator(metrics_port=port))
    with cluster.client() as client:
        a, b = cluster.accounts_apart()
        cluster.open(client, a, b)
        assert cluster.transfer(client, a, b, 10).ok
        assert not cluster.transfer(client, a, b, 1000).ok  # an overdraft
    worker = scrape(cluster.worker_metrics)
    app = f'app="{cluster.name}"'
    assert worker[f'txstream_2pc_participant_total{{{app},event="vote_yes"}}'] >= 2
    assert worker[f'txstream_te_seconds_count{{{app},procedure="debit"}}'] >= 2
    assert any(k.startswith("txstream_group_commit_seconds_count") for k in worker)
    assert any(k.startswith("txstream_recovery_seconds") for k in worker)
    coord = scrape(port)
    assert coord['txstream_coordinator_outcomes_total{outcome="2pc_committed"}'] >= 1
    violation = 'txstream_coordinator_outcomes_total{outcome="2pc_aborted_constraint_violation"}'
    assert coord[violation] >= 1


def scrape(port: int) -> dict[str, float]:
    """`name{labels}` -> value, from a /metrics page (labels in the order served)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_the_whole_run_replays_equal(
    cluster: BankCluster, coordinator: list[ServiceProcess]
) -> None:
    """Every test above ran transactions on this app, through crashes, lost prepares and
    lost decisions: `txstream verify` replays each request and decision every engine took,
    in its order, and finds every table as the engines committed it. (Last in the module:
    it stops the processes, so nothing commits while it reads.)"""
    cluster.stop_all()
    app = from_params(json.loads(cluster.params))
    verdict = verify(cluster.settings, app, cluster.partitions)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()
    assert verdict.batches >= 20  # OLTP records replayed: opens, runs, prepares, decisions
