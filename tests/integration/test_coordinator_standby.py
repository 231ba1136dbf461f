"""A standby coordinator and the truncated coordinator log, on the real broker.

Covered: with two coordinator processes for one app, SIGKILLing the active one while 2PC
transfers run lets the standby take over, and the next multi-partition transfer commits
within 10 s of the kill; money is conserved and no transaction is decided twice or two
ways. The coordinator log is truncated below its oldest open transaction while that
transaction's records stay, and a coordinator restarted on the truncated log still finds
that transaction in doubt and decides it at the epoch of its prepare. A restart on a log
truncated past every request handles none of them again (the input positions are in the
log), and offsets committed to the group before the positions were logged still count.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from bank.dataflow import INITIAL_BALANCE, build_app
from tests.support.bank_cluster import BankCluster, assert_each_decided_once, wait_for_text
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.sequencer_driver import unique
from tests.support.service_process import ServiceProcess
from txstream.client import TxClient, fragment
from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin
from txstream.kafka.clients import common_config, idempotent_producer_config
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.oltp.messages import CoordinatorLog, Decision, Fragment, TxnResult, Wire
from txstream.oltp.origin import Origin
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask
from txstream.schemas.registry import SchemaRegistry
from txstream_coordinator.metrics import OUTCOMES
from txstream_coordinator.runtime import CoordinatorService

pytestmark = pytest.mark.kafka

TAKEOVER_S = 10.0
WAIT_S = 30.0


class Load:
    """2PC transfers back and forth over account pairs, in a thread, until stopped."""

    def __init__(self, cluster: BankCluster, pairs: list[tuple[int, int]]) -> None:
        self.cluster, self.pairs = cluster, pairs
        self.results: list[TxnResult] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="load")
        self.thread.start()

    def _run(self) -> None:
        with self.cluster.client(timeout_s=30) as client:
            i = 0
            while not self.stop.is_set():
                a, b = self.pairs[i % len(self.pairs)]
                self.results.append(self.cluster.transfer(client, a, b, 1 + i % 3, 30))
                i += 1

    def committed(self) -> int:
        return sum(r.ok for r in self.results)

    def join(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "a transfer outlived its own timeout"


def money(cluster: BankCluster, client: TxClient) -> tuple[int, int]:
    """The total balance and the number of accounts."""
    totals = cluster.totals(client)
    return totals["sum_balance"], totals["count"]


def poll(done: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g}s waiting for {what}"
        time.sleep(0.05)


def serve_with_standby(
    cluster: BankCluster, client: TxClient
) -> tuple[ServiceProcess, list[tuple[int, int]]]:
    """Three pairs of accounts on two engines each, a transfer the running coordinator
    serves, then a second coordinator, standing by. Returns it and the pairs."""
    pairs = [cluster.accounts_apart() for _ in range(3)]
    cluster.open(client, *(a for pair in pairs for a in pair))
    assert cluster.transfer(client, *pairs[0], 1).ok  # the first one serves
    second = cluster.coordinator(log="coordinator-2.log")
    wait_for_text(second.log, "standing by", WAIT_S)
    return second, pairs


def test_standby_takes_over_a_killed_coordinator_within_10s(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    cluster = BankCluster(kafka.settings, tmp_path)
    try:
        cluster.worker()
        first = cluster.coordinator(log="coordinator-1.log")
        with cluster.client(timeout_s=30) as client:
            second, pairs = serve_with_standby(cluster, client)
            before = money(cluster, client)

            load = Load(cluster, pairs[1:])
            try:
                poll(lambda: load.committed() >= 5, "transfers under load")
                assert first.alive(), "the first coordinator died: the standby fought it"
                killed_at = time.monotonic()
                first.kill()
                while True:
                    r = cluster.transfer(client, *pairs[0], 1, timeout_s=TAKEOVER_S)
                    took = time.monotonic() - killed_at
                    if r.ok or took >= TAKEOVER_S:
                        break
                assert r.ok and took < TAKEOVER_S, (
                    f"no 2PC transfer committed within {TAKEOVER_S:g}s of the kill "
                    f"(last after {took:.1f}s: {r.status} {r.reason})"
                )
                committed_at_takeover = load.committed()
                poll(lambda: load.committed() > committed_at_takeover, "load after takeover")
            finally:
                load.join()
            wait_for_text(second.log, "took over", 1)
            assert money(cluster, client) == before, "money was made or lost"
        assert_each_decided_once(cluster)
    finally:
        cluster.stop_all()


# -- the truncated log --------------------------------------------------------------------

PARTITIONS = 4
BUSY = (0, 1)  # the partitions the transfers of the log's tests run on


class Harness:
    """The bank app on 4 partitions with its engines stepped here, so partitions 2 and 3
    can hold a transaction in doubt while 0 and 1 run many more; the coordinator runs in
    a thread and can be replaced by a fresh one on the same log."""

    def __init__(self, settings: Settings) -> None:
        self.app = build_app(unique("coordlog").replace("-", "_"))
        self.topics = AppTopics(self.app.name)
        self.settings = settings
        self.admin = TopicAdmin(settings)
        ensure_topics(self.admin, self.topics, ["payroll", "payouts"], PARTITIONS, True)
        self.registry = SchemaRegistry(settings.schema_dir)
        self.wire = Wire(self.registry, Origin.of(settings))
        self.coordinator, self._thread = self._start_coordinator()
        self.tasks = [PartitionTask(self.app, p, settings) for p in range(PARTITIONS)]
        self.pumps = [TaskPump(t, t.open()) for t in self.tasks]
        self.client = TxClient(self.app.name, settings, timeout_s=WAIT_S)
        self._next_account = 0

    def _start_coordinator(self) -> tuple[CoordinatorService, threading.Thread]:
        service = CoordinatorService(self.app, self.settings)
        service.open()
        thread = threading.Thread(target=service.run, name="coordinator")
        thread.start()
        return service, thread

    def stop_coordinator(self) -> None:
        self.coordinator.stopping.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive(), "the coordinator did not stop"

    def start_coordinator(self) -> None:
        self.coordinator, self._thread = self._start_coordinator()

    def restart_coordinator(self) -> None:
        self.stop_coordinator()
        self.start_coordinator()

    def close(self) -> None:
        self.client.close()
        self.stop_coordinator()
        for pump, task in zip(self.pumps, self.tasks, strict=True):
            pump.close()
            task.close()

    def until(self, done: Callable[[], bool], what: str, partitions: tuple[int, ...]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for p in partitions:
                self.pumps[p].step(timeout_s=0.01)

    def call(self, fragments: list[Fragment], partitions: tuple[int, ...]) -> TxnResult:
        future = self.client.submit(fragments)
        self.until(future.done, "a result", partitions)
        return future.result()

    def open_account(self, partition: int) -> int:
        while True:
            self._next_account += 1
            if partition_of((self._next_account,), PARTITIONS) == partition:
                break
        a = self._next_account
        r = self.call([fragment(a, "open_accounts", accounts=[a])], (partition,))
        assert r.ok, r
        return a

    def settled_balances(self, *accounts: int) -> tuple[int, ...]:
        """The accounts' committed balances, once every transaction has ended and the
        partitions stepped here have committed."""
        return self.settled_balances_of(BUSY, *accounts)

    def settled_balances_of(self, partitions: tuple[int, ...], *accounts: int) -> tuple[int, ...]:
        self.until(lambda: not self.coordinator.machine.active, "every transfer to end", partitions)
        for p in partitions:
            self.tasks[p].commit()
        rows = {k: v for p in partitions for k, v in self.tasks[p].tables()["accounts"].items()}
        return tuple(rows[(a,)]["balance"] for a in accounts)

    def settled_after_a_transfer(self, a: int, b: int) -> tuple[int, ...]:
        """Once a (re)started coordinator serves, one more transfer of 1 from `a` to `b`;
        then both accounts' settled balances."""
        self.until(lambda: self.coordinator.active, "the new coordinator to take over", ())
        assert self.call(transfer(a, b, 1), BUSY).ok
        return self.settled_balances(a, b)

    def log_records(self) -> list[tuple[int, CoordinatorLog]]:
        return [
            (msg.offset() or 0, self.wire.decode(CoordinatorLog, msg.value() or b""))
            for msg in read_to_committed_end(self.settings, self.topics.coordinator_log)
        ]


def transfer(a: int, b: int, amount: int) -> list[Fragment]:
    return [
        fragment(a, "debit", account=a, amount=amount),
        fragment(b, "credit", account=b, amount=amount),
    ]


@pytest.fixture
def harness(kafka: KafkaEnv, tmp_path: Path) -> Iterator[Harness]:
    settings = kafka.settings.model_copy(
        update={"home": tmp_path, "coordinator_log_truncate_s": 0.2}
    )
    h = Harness(settings)
    try:
        yield h
    finally:
        h.close()


def test_log_is_truncated_below_the_oldest_open_transaction(harness: Harness) -> None:
    h = harness
    a0, a1, a2, a3 = (h.open_account(p) for p in range(PARTITIONS))
    busy = (0, 1)
    for _ in range(10):
        assert h.call(transfer(a0, a1, 1), busy).ok
    # in doubt: prepared to partitions 2 and 3, which are not stepped until the restart
    pending: Future[TxnResult] = h.client.submit(transfer(a2, a3, 40), timeout_s=120)

    def in_doubt_now() -> list[tuple[str, int]]:
        active = list(h.coordinator.machine.active.values())
        return [(t.txn_id, t.epoch) for t in active if t.participants == [2, 3]]

    h.until(lambda: bool(in_doubt_now()), "the in-doubt transaction", busy)
    [(txn_id, epoch)] = in_doubt_now()
    for _ in range(20):
        assert h.call(transfer(a1, a0, 1), busy).ok
    begin = next(o for o, r in h.log_records() if r.kind == "begin" and r.txn_id == txn_id)
    log = h.topics.coordinator_log
    h.until(lambda: h.admin.start_offset(log, 0) == begin, "the log to be truncated", busy)
    assert begin > 30, "ten transactions (begin, decision, end each) came before it"

    h.restart_coordinator()
    h.until(lambda: h.coordinator.active, "the new coordinator to take over", ())
    recovered = h.coordinator.machine
    assert recovered.epoch > epoch
    assert recovered.active[txn_id].epoch == epoch, "recovered at its own epoch"
    h.until(pending.done, "the in-doubt transaction's outcome", (2, 3))
    result = pending.result()
    assert (result.status, result.reason) == ("aborted", "coordinator_restart")
    sent = {
        (d.epoch, d.commit)
        for p in (2, 3)
        for _, v in read_to_end(h.settings, h.topics.decisions, p)
        if (d := h.wire.decode(Decision, v)).txn_id == txn_id
    }
    assert sent == {(epoch, False)}, "decided at the epoch of its prepare"
    h.until(lambda: txn_id not in recovered.active, "both participants' acks", (2, 3))
    assert h.call(transfer(a2, a3, 5), (2, 3)).ok, "participants still blocked"


def test_a_log_record_written_by_a_client_decides_nothing(harness: Harness) -> None:
    """A client writes the coordinator's log: a COMMIT decision for a transaction in doubt
    (prepared on partition 2, never on 3). A coordinator taking over skips the record for
    want of the services' tag, and aborts the transaction as it would have."""
    h = harness
    a2, a3 = h.open_account(2), h.open_account(3)
    pending: Future[TxnResult] = h.client.submit(transfer(a2, a3, 40), timeout_s=120)
    h.until(lambda: bool(h.tasks[2].engine.participant.prepared), "the prepare", (2,))
    [(txn_id, prepared)] = h.tasks[2].engine.participant.prepared.items()
    h.stop_coordinator()
    forged = CoordinatorLog("decision", prepared.epoch, txn_id, [2, 3], True)
    producer = Producer(idempotent_producer_config(h.settings))
    producer.produce(h.topics.coordinator_log, Wire(h.registry).encode(forged), partition=0)
    assert producer.flush(WAIT_S) == 0
    refused = OUTCOMES.labels("unauthenticated")
    before = refused._value.get()
    h.start_coordinator()
    h.until(lambda: h.coordinator.active, "the new coordinator to take over", ())
    assert refused._value.get() == before + 1
    h.until(pending.done, "the in-doubt transaction's outcome", (2, 3))
    result = pending.result()
    assert (result.status, result.reason) == ("aborted", "coordinator_restart")
    h.until(lambda: txn_id not in h.coordinator.machine.active, "both acks", (2, 3))
    assert h.settled_balances_of((2, 3), a2, a3) == (INITIAL_BALANCE, INITIAL_BALANCE)


def test_a_restart_on_a_log_truncated_past_every_request_handles_none_again(
    harness: Harness,
) -> None:
    """The input positions are in the log, in a record truncation never deletes while it
    is the newest: a restart reads the inputs on from them, not from the start again (the
    coordinators' group commits no offsets)."""
    h = harness
    a0, a1 = h.open_account(0), h.open_account(1)
    for _ in range(5):
        assert h.call(transfer(a0, a1, 1), BUSY).ok
    # Truncation runs every 0.2 s here, so it may be past all five begins already.
    last_begin = max((o for o, r in h.log_records() if r.kind == "begin"), default=-1)
    log = h.topics.coordinator_log
    h.until(lambda: h.admin.start_offset(log, 0) > last_begin, "the log to be truncated", BUSY)

    h.restart_coordinator()
    balances = h.settled_after_a_transfer(a0, a1)
    assert balances == (INITIAL_BALANCE - 6, INITIAL_BALANCE + 6), "a transfer ran twice"


def test_offsets_the_group_committed_before_positions_were_logged_still_count(
    harness: Harness,
) -> None:
    """A log written before the positions went in it: the offsets committed to the
    coordinators' group (as they were then) stand in, where they are further on."""
    h = harness
    a0, a1 = h.open_account(0), h.open_account(1)
    h.stop_coordinator()
    requests = TopicPartition(h.topics.oltp_in, 0)
    committer = Consumer({**common_config(h.settings), "group.id": h.coordinator.group_id})

    def end() -> int:
        return int(committer.get_watermark_offsets(requests, WAIT_S, cached=False)[1])

    try:
        before = end()
        h.client.submit(transfer(a0, a1, 7), timeout_s=1)  # handled, as the group will say
        poll(lambda: end() > before, "the transfer's request")
        committer.commit(offsets=[TopicPartition(requests.topic, 0, end())], asynchronous=False)
    finally:
        committer.close()

    h.start_coordinator()
    balances = h.settled_after_a_transfer(a0, a1)
    assert balances == (INITIAL_BALANCE - 1, INITIAL_BALANCE + 1), "the request ran again"


def test_a_broker_error_while_taking_over_is_retried(
    kafka: KafkaEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader change on the log's partition (FENCED_LEADER_EPOCH) or a slow broker during
    the take-over must not end the process: the role is still this one's, so try again."""
    settings = kafka.settings.model_copy(update={"home": tmp_path})
    service = CoordinatorService(build_app(unique("coordretry").replace("-", "_")), settings)
    service.open()
    real = service.admin.start_offset
    failures = ["Leader epoch is older than broker epoch", "did not answer within 10s"]

    def flaky(topic: str, partition: int) -> int:
        if failures:
            raise KafkaAdminError(f"cannot list offsets of {topic}[{partition}]: {failures.pop()}")
        return real(topic, partition)

    monkeypatch.setattr(service.admin, "start_offset", flaky)
    try:
        deadline = time.monotonic() + WAIT_S
        while not service.active:
            assert time.monotonic() < deadline, "the coordinator never took over"
            service.step()
        assert failures == [], "both take-over attempts that failed were made"
    finally:
        service.close()
