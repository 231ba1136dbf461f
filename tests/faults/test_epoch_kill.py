"""A spanning procedure at PL2 with a worker SIGKILLed in the middle of an epoch.

TSpoon's transfers (`bank.stream_transfers`) at PL2, epochs of 8 batches, on 4 partitions
and 2 workers, over few accounts so that batches of one epoch touch the same ones. The
transfers go in chunks of 10 batches, so each chunk ends inside an epoch; once every
partition has committed a chunk, one worker is SIGKILLed and started again. RocksDB runs
without a write-ahead log, so the restarted engines open a store behind its changelog and
replay it, while the epoch in progress goes on: its later batches must still read each
account as it stood when the epoch began. Every outcome and balance, read back from the
committed output and changelog topics, must equal `bank.transfer_reference` at PL2 (a
model of the level written apart from the engine), and `txstream verify` must agree.
`make faults` runs more chunks, more seeds, and formula updates too.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from bank.stream_transfers import build_app
from bank.transfer_reference import reference
from orders.commits import CommitWatch
from tests.support.kafka_env import KafkaEnv
from tests.support.killer import kill_leftovers
from tests.support.openings import send_openings, send_routed, transfer_outcomes
from tests.support.scale import cases, scaled, seeds
from tests.support.sequencer_driver import wait_until
from tests.support.service_process import ServiceProcess
from tests.support.simulation.spanning import random_transfers
from txstream import Isolation
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import idempotent_producer_config
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec
from txstream.testing.verify import verify

pytestmark = pytest.mark.kafka

PARTITIONS, WORKERS, ACCOUNTS, K, EPOCH, CHUNK = 4, 2, 8, 2, 8, 10
CHUNKS = scaled(3, 6)
RECOVERED = re.compile(r"recovered p(\d+): (\d+) changelog records")
SERVING = re.compile(r"serving partitions \[([\d, ]*)\] of")


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "formulas", cases([False], [False, True]), ids=lambda f: "formulas" if f else "puts"
)
@pytest.mark.parametrize("seed", seeds([11], [11, 12, 13]))
def test_transfers_at_pl2_killed_in_mid_epoch_equal_their_epoch_reference(
    kafka: KafkaEnv, tmp_path: Path, seed: int, formulas: bool
) -> None:
    settings = kafka.settings.model_copy(update={"home": tmp_path / "home"})
    rng = random.Random(seed)
    opening = {a: rng.randint(50, 150) for a in range(ACCOUNTS)}
    transfers = random_transfers(rng, ACCOUNTS, CHUNKS * CHUNK * K)
    batches = [transfers[i : i + K] for i in range(0, len(transfers), K)]
    ends = [CHUNK * (c + 1) for c in range(CHUNKS)]
    assert all(end % EPOCH != EPOCH - 1 for end in ends), "each chunk ends inside an epoch"
    want = reference(opening, batches, Isolation.PL2, EPOCH, formulas)
    assert want != reference(opening, batches), "this input must show the level"

    name = f"epochkill-{uuid.uuid4().hex[:8]}"
    app = build_app(name, Isolation.PL2, EPOCH, formulas)
    topics = AppTopics(name)
    ensure_app_topics(TopicAdmin(settings), app, PARTITIONS)
    registry = SchemaRegistry(settings.schema_dir)
    opens = BatchCodec(registry.get("bank.Opening"))
    moves = BatchCodec(registry.get("bank.Transfer"))
    params = json.dumps({"name": name, "isolation": "PL2", "epoch": EPOCH, "formulas": formulas})

    def worker(i: int) -> ServiceProcess:
        argv = ["worker", "run", "--app", "bank.stream_transfers:from_params", "--params",
                params, "--instance-id", str(i), "--no-metrics"]  # fmt: skip
        return ServiceProcess(settings, argv, tmp_path / f"worker-{i}.log")

    workers = [worker(i) for i in range(WORKERS)]
    watch = CommitWatch(settings, topics.commits, PARTITIONS)
    producer = Producer(idempotent_producer_config(settings))
    alive = lambda: all(w.alive() for w in workers)  # noqa: E731
    replayed: list[int] = []  # changelog records each restarted incarnation replayed
    try:
        per_partition = send_openings(producer, topics, opens, opening, PARTITIONS)
        assert producer.flush(60) == 0
        watch.wait({"opens": per_partition}, 120, alive)
        for c, end in enumerate(ends):
            chunk = batches[end - CHUNK : end]
            send_routed(producer, topics, moves, chunk, PARTITIONS, first=end - CHUNK + 1)
            assert producer.flush(60) == 0
            watch.wait({"transfers": [end] * PARTITIONS}, 120, alive)
            if end == ends[-1]:
                break
            victim = c % WORKERS  # each chunk's last batch is committed on every partition
            log = tmp_path / f"worker-{victim}.log"
            before = log.stat().st_size
            workers[victim].kill()
            workers[victim] = worker(victim)
            # the next chunk goes once the new incarnation has its partitions back: its
            # recovery lines say how far behind its store was
            replayed += wait_for_recovery(log, before, workers[victim])
    finally:
        watch.close()
        for w in reversed(workers):
            w.kill()
        kill_leftovers(settings.home)

    assert any(n > 0 for n in replayed), f"no restart found its store behind: {replayed}"
    codec = BatchCodec(registry.get("bank.TransferOutcome"))
    outcomes = transfer_outcomes(settings, topics, codec, PARTITIONS)
    state = StateCodec(app.dataflow(), registry)
    tables = committed_tables(settings, state, topics.changelog, PARTITIONS)
    balances = {k[0]: row["balance"] for k, row in tables["accounts"].items()}
    where = f"seed {seed}, formulas {formulas}, store behind by {replayed} records"
    assert balances == want[1], where
    assert outcomes == want[0], where
    verdict = verify(settings, app, PARTITIONS)
    assert verdict.equal, verdict.divergence and verdict.divergence.text()


def recovered(log: Path, since: int) -> dict[int, int] | None:
    """{partition: changelog records replayed} from `log` past byte `since`, once the
    incarnation writing it has recovered every partition it was last assigned."""
    text = log.read_bytes()[since:].decode(errors="replace")
    serving = SERVING.findall(text)
    if not serving or not serving[-1].strip():
        return None
    mine = {int(p) for p in serving[-1].split(",")}
    found = {int(p): int(n) for p, n in RECOVERED.findall(text)}
    return found if mine <= set(found) else None


def wait_for_recovery(log: Path, since: int, proc: ServiceProcess) -> list[int]:
    """The changelog records each partition of the new incarnation replayed."""
    wait_until(lambda: recovered(log, since) is not None, 60, proc.alive, "its recovery")
    return list((recovered(log, since) or {}).values())
