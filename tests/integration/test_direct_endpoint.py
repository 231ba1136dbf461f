"""Direct transactions over the worker's endpoint, on the real broker: the client sends a
single-partition transaction to the owning worker over HTTP, no Kafka record on the way in
or out, and is answered once the group that ran it is committed.

The worker is SIGKILLed either before that group's Kafka transaction commits or after it
commits but before the answer leaves; the client, its connection gone, sends the call
again under the same request id to the restarted worker. Before the commit, the call runs
there; after it, it is answered from what the partition kept: the account is debited
once either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bank.dataflow import from_params
from tests.integration.test_two_phase import KILLED
from tests.support.bank_cluster import BankCluster
from tests.support.kafka_env import KafkaEnv, free_port
from tests.support.kafka_reads import read_every_partition
from txstream.client import TxClient, fragment
from txstream.testing.run_inputs import Unverifiable
from txstream.testing.verify import verify

pytestmark = pytest.mark.kafka


def cluster_of(kafka: KafkaEnv, tmp: pytest.TempPathFactory, recovery: str) -> BankCluster:
    return BankCluster(kafka.settings, tmp.mktemp("endpoint"), recovery=recovery)


@pytest.fixture
def cluster(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BankCluster]:
    c = cluster_of(kafka, tmp_path_factory, "changelog")
    try:
        yield c
    finally:
        c.stop_all()


def client_of(cluster: BankCluster) -> TxClient:
    return TxClient(cluster.name, cluster.settings, 120, direct_via="endpoint")


@pytest.mark.parametrize(
    "failpoint",
    [
        "commit.before_direct_answer",  # ran, its Kafka transaction not yet committed
        "task.before_endpoint_answers",  # committed, the answer not yet sent
    ],
)
def test_a_call_whose_worker_is_killed_runs_once_and_is_answered(
    cluster: BankCluster, failpoint: str
) -> None:
    # each incarnation in the worker's slot serves where the last did, as the group names it
    port = free_port()
    worker = cluster.worker(query_port=port)
    cluster.coordinator()  # for the balance queries only
    account = cluster.account_on(0)
    with client_of(cluster) as client:
        cluster.open(client, account)
        worker.terminate()

        crashing = cluster.worker(f"{failpoint}=kill", query_port=port)
        debit = client.submit([fragment(account, "debit", account=account, amount=30)])
        assert crashing.wait_exit(120) == KILLED
        assert not debit.done(), "no answer before the group was committed and answered"
        cluster.worker(query_port=port)  # the client sends the call again, to this one
        result = client.wait(debit, 120)
        assert result.ok and result.values() == [70], result
        assert result.request_id == debit.request_id and result.partitions == [0]
        assert cluster.balance(client, account) == 70, "debited once"
    answers = read_every_partition(cluster.settings, cluster.topics.oltp_out)
    assert not [v for _, v in answers if debit.request_id.encode() in v], (
        "answered on the endpoint, not through Kafka"
    )


def test_an_app_recovering_from_its_command_log_refuses_calls_saying_why(
    kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Its replay reads only Kafka, where an endpoint call leaves no record of itself."""
    cluster = cluster_of(kafka, tmp_path_factory, "strong")
    try:
        cluster.worker()
        account = cluster.account_on(0)
        with client_of(cluster) as client:
            refused = client.call([fragment(account, "open_accounts", accounts=[account])])
        assert refused.status == "failed" and refused.reason == "refused", refused
        assert "command log" in refused.detail and "direct_via='kafka'" in refused.detail
        with TxClient(cluster.name, cluster.settings, 120) as client:  # through Kafka
            cluster.open(client, account)
    finally:
        cluster.stop_all()


def test_verify_refuses_a_run_with_endpoint_calls_and_replays_one_without(
    cluster: BankCluster,
) -> None:
    """An endpoint call leaves no input record to replay: verify names the partition that
    ran one rather than report a divergence; the other partition, through Kafka, is fine."""
    cluster.worker()
    over_endpoint, through_kafka = cluster.account_on(0), cluster.account_on(1)
    with client_of(cluster) as client:
        cluster.open(client, over_endpoint)
    with TxClient(cluster.name, cluster.settings, 120) as client:
        cluster.open(client, through_kafka)
    app = from_params(json.loads(cluster.params))
    with pytest.raises(Unverifiable, match="partition 0 ran direct transactions sent to"):
        verify(cluster.settings, app, cluster.partitions)
