"""OLTP input an attacker or a broken client controls, against the real broker.

A coordinator and the bank app's partition engines run in this process; the test steps each
engine's pump itself, so it decides when partition 1 takes part in a 2PC transaction and
can hold a victim transaction prepared on partition 0 for as long as it likes.

Covered: a request whose `reply_to` names an internal topic is refused, so a failed result
can no longer land on `<app>.decisions` and decode there as a COMMIT; a record of another
message type on the decisions topic is dead-lettered, not decided; a decision whose epoch
is not the prepare's is ignored, and the right decision still commits; garbage on the
requests and decisions topics is dead-lettered and the engine goes on serving; a promise
anywhere but the promises topic, and anything else there, is dead-lettered; parameters
that do not fit a transaction's declared signature fail as `bad_request`.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bank.dataflow import build_app
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.sequencer_driver import unique
from txstream.client import TxClient, fragment
from txstream.config import Settings
from txstream.engine.group import SYS_TABLE, position_key
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.oltp.messages import (
    Decision,
    EngineReply,
    EngineRequest,
    Fragment,
    Query,
    TxnRequest,
    TxnResult,
    Wire,
    key_json,
)
from txstream.oltp.origin import TAG_BYTES, Origin
from txstream.runtime.pump import TaskPump
from txstream.runtime.task import PartitionTask
from txstream.schemas.records import decode_record, encode_record
from txstream.schemas.registry import SchemaRegistry
from txstream_coordinator.metrics import OUTCOMES
from txstream_coordinator.runtime import CoordinatorService

pytestmark = pytest.mark.kafka

PARTITIONS = 2
WAIT_S = 30.0


class Harness:
    """The bank app with one coordinator (its own thread) and both partition engines."""

    def __init__(self, settings: Settings) -> None:
        self.app = build_app(unique("oltphard").replace("-", "_"))
        self.topics = AppTopics(self.app.name)
        self.settings = settings
        ensure_topics(TopicAdmin(settings), self.topics, ["payroll", "payouts"], PARTITIONS, True)
        self.registry = SchemaRegistry(settings.schema_dir)
        self.wire = Wire(self.registry)  # a client's: no key, tags nothing
        self.service_wire = Wire(self.registry, Origin.of(settings))  # the services' key
        self.coordinator = CoordinatorService(self.app, settings)
        self.coordinator.open()
        self._thread = threading.Thread(target=self.coordinator.run, name="coordinator")
        self._thread.start()
        self.tasks = [PartitionTask(self.app, p, settings) for p in range(PARTITIONS)]
        self.pumps = [TaskPump(t, t.open()) for t in self.tasks]
        self.client = TxClient(self.app.name, settings, timeout_s=60)
        self.producer = Producer(idempotent_producer_config(settings))
        self._next_account = 0

    def close(self) -> None:
        self.client.close()
        self.coordinator.stopping.set()
        self._thread.join(30)
        for pump, task in zip(self.pumps, self.tasks, strict=True):
            pump.close()
            task.close()

    def until(
        self, done: Callable[[], bool], what: str, partitions: tuple[int, ...] = (0, 1)
    ) -> None:
        """Step the pumps of `partitions` until `done` holds."""
        deadline = time.monotonic() + WAIT_S
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for p in partitions:
                self.pumps[p].step(timeout_s=0.01)

    def result(self, future: Future[TxnResult], partitions: tuple[int, ...] = (0, 1)) -> TxnResult:
        self.until(future.done, "a result", partitions)
        return future.result()

    def call(self, *fragments: Fragment) -> TxnResult:
        return self.result(self.client.submit(fragments))

    def account_on(self, partition: int) -> int:
        while True:
            self._next_account += 1
            if partition_of((self._next_account,), PARTITIONS) == partition:
                return self._next_account

    def open_account(self, partition: int) -> int:
        a = self.account_on(partition)
        r = self.call(fragment(a, "open_accounts", accounts=[a]))
        assert r.ok, r
        return a

    def balance(self, account: int) -> int:
        r = self.result(self.client.submit(query=Query("accounts", key=key_json((account,)))))
        assert r.ok, r
        return int(r.table_rows()[0][1]["balance"])

    def produce(self, topic: str, value: bytes, partition: int = 0) -> int:
        """Write one record as anyone could; returns its offset."""
        offsets: list[int | None] = []
        self.producer.produce(
            topic, value, partition=partition, on_delivery=lambda e, m: offsets.append(m.offset())
        )
        assert self.producer.flush(30) == 0
        [offset] = offsets
        assert offset is not None
        return offset

    def read_past(self, topic: str, offset: int, partition: int = 0) -> None:
        """Step that partition's engine until it has committed its move past `offset` of
        `topic` (so whatever it dead-lettered on the way is on the aborts topic)."""
        engine = self.tasks[partition].engine
        key = position_key(topic, partition)

        def committed() -> bool:
            row = engine.base.get(SYS_TABLE, key)
            return row is not None and int(row["value"]) > offset

        self.until(committed, f"{topic}@{offset} committed", (partition,))

    def prepared(self, partition: int = 0) -> dict[str, int]:
        """txn_id -> epoch of what that partition holds prepared."""
        held = self.tasks[partition].engine.participant.prepared
        return {t: h.epoch for t, h in held.items()}

    def dead_letters(self, partition: int = 0) -> list[dict[str, object]]:
        schema = self.registry.get("txstream.AbortRecord")
        return [
            decode_record(schema, v)
            for _, v in read_to_end(self.settings, self.topics.aborts, partition)
        ]


@pytest.fixture(scope="module")
def harness(kafka: KafkaEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    home: Path = tmp_path_factory.mktemp("oltp-hardening")
    h = Harness(kafka.settings.model_copy(update={"home": home}))
    try:
        yield h
    finally:
        h.close()


def test_forged_decisions_never_commit_a_prepared_fragment(harness: Harness) -> None:
    h = harness
    a, b, other = h.open_account(0), h.open_account(1), h.open_account(0)
    transfer = [
        fragment(a, "debit", account=a, amount=30),
        fragment(b, "credit", account=b, amount=30),
    ]
    victim = h.client.submit(transfer)
    # only partition 0 runs: the victim's debit is prepared there, partition 1 has not voted
    h.until(lambda: bool(h.prepared()), "the victim's prepare", (0,))
    [(txn_id, epoch)] = h.prepared().items()

    # 1. A failed request (timeout_ms 0) named for the victim, its result aimed at the
    #    decisions topic: decoded there, it would read as Decision(victim, commit=True).
    forged = TxnRequest(txn_id, h.topics.decisions, 0, [])
    h.produce(h.topics.oltp_in, h.wire.encode(forged))
    counts = h.coordinator.machine.counts
    h.until(
        lambda: counts.get("refused_reply_to", 0) > 0 or txn_id not in h.prepared(),
        "the forged request to be handled",
        (0,),
    )
    assert txn_id in h.prepared(), "a failed result on the decisions topic committed the victim"
    assert not victim.done()

    # 2. The same result written straight onto the decisions topic: another message type.
    result = TxnResult(txn_id, "9.9", "failed", "bad_request", "forged")
    h.read_past(h.topics.decisions, h.produce(h.topics.decisions, h.wire.encode(result)))
    assert txn_id in h.prepared(), "a TxnResult on the decisions topic committed the victim"
    assert h.dead_letters()[-1]["reason"] == "unauthenticated"  # no tag: not even decoded

    # 3. A well-formed decision, at any epoch, from a client: it lacks the services' tag.
    for at in (epoch - 1, epoch, epoch + 1):
        forged_decision = Decision(txn_id, at, True)
        offset = h.produce(h.topics.decisions, h.wire.encode(forged_decision))
        h.read_past(h.topics.decisions, offset)
        assert txn_id in h.prepared(), f"a client's decision at epoch {at} decided the victim"
        assert h.dead_letters()[-1]["reason"] == "unauthenticated"

    # 4. A promise the client names after the victim: the engine names it, and it takes
    #    nothing of the victim's (before, it took the victim's COMMIT).
    named = EngineRequest(txn_id, 0, "promise", "r-named", h.topics.oltp_out,
                          [fragment(other, "debit", account=other, amount=1)])  # fmt: skip
    h.read_past(h.topics.promises, h.produce(h.topics.promises, h.wire.encode(named)))
    assert h.prepared() == {txn_id: epoch}
    assert txn_id not in h.tasks[0].engine.participant.promises.held

    # 5. Even with the key, a decision at another epoch than the prepare's is ignored.
    for at in (epoch - 1, epoch + 1):
        stale = Decision(txn_id, at, True)
        offset = h.produce(h.topics.decisions, h.service_wire.encode(stale))
        h.read_past(h.topics.decisions, offset)
        assert txn_id in h.prepared(), f"a decision of epoch {at} decided epoch {epoch}'s"
    assert h.dead_letters()[-1]["reason"] == "wrong_epoch"

    # The coordinator's own decision, at the prepare's epoch, still commits both sides.
    r = h.result(victim)
    assert r.ok, r
    assert (h.balance(a), h.balance(b)) == (70, 130)


def test_forged_votes_and_replies_decide_nothing(harness: Harness) -> None:
    """A client writes the engines' replies topic: a yes vote for the partition that has
    not voted (before: the victim committed with one side only prepared), a no vote (before:
    the victim aborted), a promise's deltas that free a whole constraint's bound, and a
    single-partition result for the victim's client. The coordinator refuses each for
    want of the engines' tag; the victim commits as the real votes say."""
    h = harness
    a, b = h.open_account(0), h.open_account(1)
    victim = h.client.submit([fragment(a, "debit", account=a, amount=5),
                              fragment(b, "credit", account=b, amount=5)])  # fmt: skip
    h.until(lambda: bool(h.prepared()), "the victim's prepare", (0,))
    [(txn_id, epoch)] = h.prepared().items()
    refused = OUTCOMES.labels("unauthenticated")
    before = refused._value.get()
    out = h.topics.oltp_out
    forged = [
        EngineReply(txn_id, 1, "vote", True, epoch=epoch),
        EngineReply(txn_id, 1, "vote", False, "forged", "no", epoch=epoch),
        EngineReply(
            "P1.0", 1, "promise", True, rows='[["x", -1000000]]', request_id="r", reply_to=out
        ),
        EngineReply(txn_id, 0, "result", True, results="[1]", request_id="r", reply_to=out),
    ]
    for reply in forged:
        h.produce(h.topics.replies, h.wire.encode(reply))
    deadline = time.monotonic() + WAIT_S
    while refused._value.get() < before + len(forged):
        assert time.monotonic() < deadline, "the coordinator did not refuse the forged replies"
        time.sleep(0.05)  # the coordinator runs in its own thread; nothing to step here
    assert h.prepared() == {txn_id: epoch} and not victim.done()
    r = h.result(victim)
    assert r.ok, r
    assert (h.balance(a), h.balance(b)) == (95, 105)


def test_garbage_on_requests_and_decisions_is_dead_lettered(harness: Harness) -> None:
    """Garbage from a client fails its proof of origin; garbage with a valid tag (a
    service's bug) fails to decode, also with a reader that raised anything but
    ValueError before. Either way a dead letter, and the engine serves the next request."""
    h = harness
    rng = random.Random(19)
    request = EngineRequest("1.999", 1, "run", "r", h.topics.oltp_out, [fragment(1, "debit")])
    valid = h.service_wire.encode(request)[:-TAG_BYTES]
    notice = h.registry.get("txstream.CommitNotice")
    other_schema = encode_record(
        notice,
        {"app": "x", "partition": 0, "batches": 1, "executions": 1, "aborts": 0,
         "last_batch_ids": {}, "first_batch_ids": {}, "committed_at_ms": 0},
    )  # fmt: skip
    garbage = [
        b"\xca",  # a varint cut short: fastavro raised IndexError, which stopped the engine
        b"",
        *(bytes(rng.randrange(256) for _ in range(rng.randrange(2, 64))) for _ in range(6)),
        valid[: len(valid) // 2],
        valid + b"\x00\x01",
        other_schema,
        h.wire.encode(TxnResult("r", "1.1", "committed")),
    ]
    origin = Origin.of(h.settings)
    before = len(h.dead_letters())
    last = 0
    tagged = [v for v in garbage if v]  # a tag alone would be refused as no tag
    for topic in (h.topics.requests, h.topics.decisions):
        for value in garbage:
            last = h.produce(topic, value)
        for value in tagged:
            last = h.produce(topic, origin.sign(value))
    h.read_past(h.topics.decisions, last)
    expected = 2 * (len(garbage) + len(tagged))
    # the position may be read from the group in flight: wait for its commit too
    h.until(lambda: len(h.dead_letters()) >= before + expected, "the dead letters", (0,))
    letters = h.dead_letters()[before:]
    reasons = Counter(str(d["reason"]) for d in letters)
    # untagged, each is refused for want of a tag; tagged, each fails to decode
    assert reasons == {"unauthenticated": 2 * len(garbage), "undecodable": 2 * len(tagged)}
    assert all(d["error"] for d in letters)

    # the engine goes on: a good request still gets its result
    a = h.open_account(0)
    assert h.balance(a) == 100


def test_requests_and_promises_each_keep_to_their_own_topic(harness: Harness) -> None:
    """Clients may write promises, so the engine takes nothing else from that topic (a
    forged `run` there would bypass the coordinator), and no promise from the requests
    topic, not even one with the services' tag: all are dead letters that change nothing."""
    h = harness
    a = h.open_account(0)
    debit = [fragment(a, "debit", account=a, amount=7)]
    forged = EngineRequest("1.998", 1, "run", "r1", h.topics.oltp_out, debit)
    misplaced = EngineRequest("p.r2", 0, "promise", "r2", h.topics.oltp_out, debit)
    before = len(h.dead_letters())
    h.produce(h.topics.promises, h.wire.encode(forged))
    h.produce(h.topics.requests, h.wire.encode(misplaced))
    tagged = Origin.of(h.settings).sign(h.wire.encode(misplaced))
    last = h.produce(h.topics.requests, tagged)
    h.read_past(h.topics.requests, last)
    h.read_past(h.topics.promises, h.produce(h.topics.promises, b"\xca"))
    h.until(lambda: len(h.dead_letters()) >= before + 4, "the dead letters", (0,))
    letters = h.dead_letters()[before:]
    reasons = [str(d["reason"]) for d in letters]
    assert sorted(reasons) == ["unauthenticated", "unauthenticated", "undecodable", "undecodable"]
    assert sum("takes promised (BASIC, BASE)" in str(d["error"]) for d in letters) == 1
    assert h.balance(a) == 100
    # a promise where promises go runs, and is serialized by the coordinator
    p = h.client.promise(debit)
    assert p.promised() > 0
    assert h.result(p.final).ok and h.balance(a) == 93


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"account": 0}, "'amount'"),  # missing
        ({"account": 0, "amount": 5, "amout": 5}, "'amout'"),  # not declared
        ({"account": 0, "amount": "5"}, "'amount'"),  # mistyped
    ],
)
def test_parameters_must_fit_the_declared_signature(
    harness: Harness, params: dict[str, object], named: str
) -> None:
    h = harness
    a = h.open_account(0)
    params = {**params, "account": a}
    position = h.tasks[0].engine.position(h.topics.requests)
    r = h.call(Fragment.call(a, "debit", **params))
    assert (r.status, r.reason) == ("failed", "bad_request"), r
    assert named in r.detail, r.detail
    # refused at the coordinator: no engine was asked to run anything
    assert h.tasks[0].engine.position(h.topics.requests) == position
    assert h.balance(a) == 100
