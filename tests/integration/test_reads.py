"""Reads of committed state from the worker that owns them, on the real broker.

Two workers, each owning one of the bank's two partitions, answer on their query endpoints
(found from the app's consumer group). A read shows what its partition committed, with
what that reflects; a client sees its own writes at once, direct and 2PC alike; a worker
asked for a row it does not own redirects to the owner; a read-only call that writes fails
and changes nothing; with no worker running, a read fails saying so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
import requests
from confluent_kafka import KafkaException

from tests.support.bank_cluster import BankCluster
from tests.support.kafka_env import KafkaEnv, free_port
from txstream import AsyncTxClient, TxnResult
from txstream.client import fragment
from txstream.kafka.owners import WorkerGroup
from txstream.kafka.routing import partition_of
from txstream.read_client import ReadUnavailable

pytestmark = pytest.mark.kafka


@pytest.fixture
def cluster(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BankCluster]:
    c = BankCluster(kafka.settings, tmp_path_factory.mktemp("reads"))
    try:
        yield c
    finally:
        c.stop_all()


def two_owners(cluster: BankCluster, timeout_s: float = 120) -> dict[int, str]:
    """Until each partition has an owner, and the two are different workers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = WorkerGroup(cluster.settings, cluster.name).owners()
        except KafkaException:  # the group's coordinator is still loading
            found = {}
        if set(found) == {0, 1} and found[0] != found[1]:
            return found
        time.sleep(0.2)
    raise AssertionError(f"the two workers did not each take a partition in {timeout_s:.0f} s")


def test_reads_show_committed_rows_and_the_clients_own_writes_at_once(
    cluster: BankCluster,
) -> None:
    cluster.worker()
    cluster.worker()
    cluster.coordinator()
    a, b = cluster.accounts_apart()
    endpoints = two_owners(cluster)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, a, b)
        first = client.read("accounts", a)
        assert first.found and first.row is not None and first.row["balance"] == 100
        assert first.freshness["partition"] == partition_of((a,), 2)
        assert sum(first.freshness["positions"].values()) > 0, "it names what it reflects"
        assert not client.read("accounts", 10_000).found

        for i in range(1, 21):  # direct writes: each read right after its answer sees it
            assert client.call([fragment(a, "debit", account=a, amount=1)]).ok
            assert client.read("accounts", a).row == {**first.row, "balance": 100 - i}
        for i in range(1, 11):  # 2PC: told committed before the decisions are applied
            assert cluster.transfer(client, b, a, 1).ok
            assert client.read("accounts", b).row["balance"] == 100 - i  # type: ignore[index]
            assert client.read("accounts", a).row["balance"] == 80 + i  # type: ignore[index]
        assert client.read("accounts", a).freshness["positions"] != first.freshness["positions"]

    # a worker asked for a row of the other's partition sends the asker there
    owner_of_a = endpoints[partition_of((a,), 2)]
    other = endpoints[1 - partition_of((a,), 2)]
    url = f"{other}/v1/tables/accounts/row?key={a}"
    moved = requests.get(url, allow_redirects=False, timeout=30)
    assert moved.status_code == 307 and moved.headers["location"].startswith(owner_of_a)
    body = requests.get(url, timeout=30).json()
    assert body["found"] and body["row"]["balance"] == 90 and body["key"] == [a]
    unknown = requests.get(f"{owner_of_a}/v1/tables/acounts/row?key={a}", timeout=30)
    assert unknown.status_code == 404 and "no table 'acounts'" in unknown.json()["detail"]


def test_a_read_only_call_that_writes_fails_and_changes_nothing(cluster: BankCluster) -> None:
    cluster.worker()
    cluster.coordinator()
    a = cluster.account_on(0)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, a)
        r = client.call([fragment(a, "debit", account=a, amount=5)], read_only=True)
        assert (r.status, r.reason) == ("aborted", "read_only"), r
        assert "accounts" in r.detail
        assert client.read("accounts", a).row["balance"] == 100  # type: ignore[index]
        with pytest.raises(ValueError, match="one partition"):
            b = cluster.account_on(1)
            client.submit_read_only([fragment(a, "debit", account=a, amount=1),
                                     fragment(b, "debit", account=b, amount=1)])  # fmt: skip


def test_a_read_with_no_worker_running_fails_saying_so(cluster: BankCluster) -> None:
    with cluster.client(timeout_s=60) as client:
        started = time.monotonic()
        with pytest.raises(ReadUnavailable, match="no worker holds it"):
            client.read("accounts", 1, timeout_s=3)
        assert time.monotonic() - started < 30


def test_the_asyncio_client_calls_and_reads_with_its_bound_on_requests_in_flight(
    cluster: BankCluster,
) -> None:
    cluster.worker()
    cluster.coordinator()
    a = cluster.account_on(0)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, a)

    async def run() -> tuple[list[TxnResult], int, int]:
        async with AsyncTxClient(cluster.name, cluster.settings, 60, max_in_flight=4) as c:
            credits = [c.call([fragment(a, "credit", account=a, amount=1)]) for _ in range(40)]
            results = await asyncio.gather(*credits)
            row = await c.read("accounts", a)
            assert row.row is not None
            return results, row.row["balance"], c.client.in_flight.peak

    results, balance, peak = asyncio.run(run())
    assert all(r.ok for r in results) and len(results) == 40
    assert balance == 140, "every credit applied once, and the read after them sees them all"
    assert peak == 4, "never more than its bound in flight, and the bound reached"


def test_reads_of_a_sigkilled_workers_partition_are_answered_by_its_next_owner(
    cluster: BankCluster,
) -> None:
    """The client keeps asking whoever the group names: after the session timeout the other
    worker owns the partition, restored, and answers with what was committed."""
    ports = free_port(), free_port()
    workers = {f"http://127.0.0.1:{p}": cluster.worker(query_port=p) for p in ports}
    cluster.coordinator()
    a = cluster.account_on(0)
    endpoints = two_owners(cluster)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, a)
        for _ in range(5):
            assert client.call([fragment(a, "debit", account=a, amount=2)]).ok
        owner = endpoints[0]
        workers[owner].kill()
        row = client.read("accounts", a, timeout_s=120)
        assert row.row is not None and row.row["balance"] == 90
        assert WorkerGroup(cluster.settings, cluster.name).owners()[0] != owner, (
            "another worker answered"
        )
