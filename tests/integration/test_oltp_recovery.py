"""OLTP transactions under command-log recovery (strong and weak), on the real broker.

The command log records each coordinator request and decision an engine handled, by
offset, in the order they ran. Here a worker is SIGKILLed right after voting on a 2PC
transaction and its RocksDB is deleted: the replay must rebuild every committed transfer
and the prepared (still undecided) one, which then commits or aborts with the rest.
`make test` runs strong; `make faults` (TXSTREAM_FAULTS=long) runs weak as well.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator

import pytest

from tests.integration.test_two_phase import KILLED, transfer_fragments, unblocked
from tests.support.bank_cluster import BankCluster, wait_for_text
from tests.support.kafka_env import KafkaEnv
from tests.support.scale import LONG

pytestmark = [pytest.mark.kafka, pytest.mark.faults]


@pytest.fixture(params=["strong", "weak"] if LONG else ["strong"])
def cluster(
    request: pytest.FixtureRequest, kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BankCluster]:
    c = BankCluster(kafka.settings, tmp_path_factory.mktemp("oltplog"), recovery=request.param)
    try:
        yield c
    finally:
        c.stop_all()


def test_replay_rebuilds_committed_and_prepared_transactions(cluster: BankCluster) -> None:
    worker = cluster.worker()
    cluster.coordinator()
    accounts = [cluster.account_on(p) for p in (0, 1, 0, 1)]
    expected = dict.fromkeys(accounts, 100)
    with cluster.client(timeout_s=60) as client:
        cluster.open(client, *accounts)
        for i, (a, b) in enumerate([(0, 1), (1, 2), (2, 0), (3, 1), (0, 2)]):
            r = cluster.transfer(client, accounts[a], accounts[b], 10 + i)
            assert r.ok, r
            expected[accounts[a]] -= 10 + i
            expected[accounts[b]] += 10 + i

        worker.terminate()
        crashing = cluster.worker("engine.after_vote=kill")
        pending = client.submit(transfer_fragments(accounts[3], accounts[0], 7), timeout_s=60)
        assert crashing.wait_exit(120) == KILLED
        shutil.rmtree(cluster.settings.data_dir / "engines" / cluster.name)  # state lost too

        seen = crashing.log.stat().st_size  # the workers share one log: read only the new part
        restarted = cluster.worker()
        wait_for_text(restarted.log, "holds prepared transactions", 120)
        own = restarted.log.read_text(errors="replace")[seen:]
        assert "holds prepared transactions" in own
        replayed = re.findall(r"recovered p\d: (\d+) cmdlog records", own)
        assert replayed and sum(map(int, replayed)) > 0, "nothing was replayed"
        result = client.wait(pending, 60)
        if result.ok:
            expected[accounts[3]] -= 7
            expected[accounts[0]] += 7
        got = {a: cluster.balance(client, a) for a in accounts}
        assert got == expected
        unblocked(cluster, client, accounts[0], accounts[1])
