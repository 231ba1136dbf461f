"""Direct transactions on the real broker: a single-partition transaction goes from the
client straight to its partition's engine, and the engine answers the client.

The worker is SIGKILLed after running a debit and before its group commit (which holds the
answer) lands; the client, with no answer, sends the same request again. The restarted
worker runs the first send (its commit never happened) and answers the resend from what
it kept: the account is debited once, and both answers are the first outcome.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.test_two_phase import KILLED
from tests.support.bank_cluster import BankCluster
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_every_partition, read_to_end
from txstream.client import OltpTimeout, TxClient, fragment
from txstream.kafka.admin import TopicAdmin
from txstream.oltp.messages import EngineRequest, TxnResult, Wire
from txstream.schemas.registry import SchemaRegistry

pytestmark = pytest.mark.kafka


@pytest.fixture
def cluster(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BankCluster]:
    c = BankCluster(kafka.settings, tmp_path_factory.mktemp("direct"))
    try:
        yield c
    finally:
        c.stop_all()


def test_a_resend_after_a_worker_sigkill_runs_once_with_the_first_answer(
    cluster: BankCluster,
) -> None:
    worker = cluster.worker()
    cluster.coordinator()  # for the balance queries only
    account = cluster.account_on(0)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, account)
        worker.terminate()

        crashing = cluster.worker("commit.before_direct_answer=kill")
        debit = [fragment(account, "debit", account=account, amount=30)]
        with pytest.raises(OltpTimeout) as timed_out:
            client.call(debit, timeout_s=5)  # ran, and killed before its answer went out
        assert crashing.wait_exit(120) == KILLED
        request_id = timed_out.value.request_id
        assert request_id is not None
        resent = client.submit(debit, request_id=request_id)

        cluster.worker()
        result = client.wait(resent, 120)
        assert result.ok and result.values() == [70], result
        assert cluster.balance(client, account) == 70, "debited once"

    wire = Wire(SchemaRegistry(cluster.settings.schema_dir))
    sent = [wire.decode(EngineRequest, v, promises=True)
            for _, v in read_to_end(cluster.settings, cluster.topics.promises)]  # fmt: skip
    assert [r.request_id for r in sent].count(request_id) == 2, "the client sent it twice"
    out = read_every_partition(cluster.settings, cluster.topics.oltp_out)
    answers = [wire.decode(TxnResult, v) for _, v in out]
    mine = [a for a in answers if a.request_id == request_id]
    assert len(mine) == 2 and mine[0] == mine[1], "each send answered, both with the first outcome"
    assert mine[0].partitions == [0]


def test_a_direct_transaction_naming_another_reply_topic_is_refused(
    cluster: BankCluster,
) -> None:
    """A client cannot make an engine write its answer to another topic of the app."""
    cluster.worker()
    cluster.coordinator()
    account = cluster.account_on(0)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, account)
        wire = Wire(SchemaRegistry(cluster.settings.schema_dir))
        forged = EngineRequest("p.x", 0, "direct", "forged", cluster.topics.decisions,
                               [fragment(account, "debit", account=account, amount=1)])  # fmt: skip
        client.producer.produce(cluster.topics.promises, wire.encode(forged), partition=0)
        client.producer.flush(10)
        cluster.open(client, cluster.account_on(0))  # a later transaction: the forged one is past
        assert cluster.balance(client, account) == 100, "the forged debit never ran"
    aborts = [v for _, v in read_to_end(cluster.settings, cluster.topics.aborts)]
    assert any(b"refused_reply_to" in v for v in aborts), "dead-lettered with its reason"
    assert not read_to_end(cluster.settings, cluster.topics.decisions), "nothing written there"


def test_each_client_reads_only_its_own_answers(cluster: BankCluster) -> None:
    """Answers go to the reply partition each client reads, named in its request ids, from
    the engines (direct) and from the coordinator (2PC, queries) alike."""
    cluster.worker()
    cluster.coordinator()
    a, b = cluster.accounts_apart()
    settings = cluster.settings
    with (
        TxClient(cluster.name, settings, 60, reply_partition=1) as first,
        TxClient(cluster.name, settings, 60, reply_partition=2) as second,
    ):
        assert first.listening() == {1} and second.listening() == {2}
        cluster.open(first, a)
        cluster.open(second, b)
        for client in (first, second):
            assert cluster.transfer(client, a, b, 1).ok  # 2PC, through the coordinator
            assert client.call([fragment(a, "credit", account=a, amount=1)]).ok  # direct
            assert cluster.balance(client, a) > 0  # a query
    wire = Wire(SchemaRegistry(settings.schema_dir))
    out = cluster.topics.oltp_out
    by_partition = {
        p: {wire.decode(TxnResult, v).request_id for _, v in read_to_end(settings, out, p)}
        for p in TopicAdmin(settings).partitions(out)
    }
    assert all(rid.startswith("r1-") for rid in by_partition[1]) and len(by_partition[1]) >= 4
    assert all(rid.startswith("r2-") for rid in by_partition[2]) and len(by_partition[2]) >= 4
    assert not any(ids for p, ids in by_partition.items() if p not in (1, 2))


def test_a_call_with_no_worker_running_says_so_and_runs_when_one_starts(
    cluster: BankCluster,
) -> None:
    account = cluster.account_on(0)
    with cluster.client(timeout_s=60) as client:
        with pytest.raises(OltpTimeout, match=r"no worker of app .* is running") as stopped:
            client.call([fragment(account, "open_accounts", accounts=[account])], 3)
        request_id = stopped.value.request_id
        assert request_id is not None
        cluster.worker()
        cluster.coordinator()  # for the balance query
        deadline = time.monotonic() + 120
        while True:  # asked again, until the worker has joined and answers
            try:
                again = client.call([fragment(account, "open_accounts", accounts=[account])],
                                    30, request_id=request_id)  # fmt: skip
                break
            except OltpTimeout as e:
                assert time.monotonic() < deadline, e
        assert again.ok, again
        assert cluster.balance(client, account) == 100
