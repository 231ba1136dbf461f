"""Peer (d), ordering relaxed: txstream with the votes spread over several partitions.

Within one partition engine, stream and graph order come free (the engine runs TEs one at a
time), so relaxing order only means something across partitions: S-Store's "H-Store async,
no order" line lets batches run without the global order. Here the votes are partitioned by
phone number (`txstream.kafka.routing`, as the sequencer and OLTP place keys) over
`partitions` engines, one worker process each; each engine keeps its own contestants,
counter, window and removals, and orders only its own batches. Each batch is still an ACID
nested transaction, processed exactly once. The result is the sum of the
per-partition boards, which is not the workload's global result: it is reported as such.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.leaderboard_peers.check import Measured
from bench.leaderboard_peers.raw_batches import codecs_of, transactional_producer
from leaderboard.dataflow import Params, build_app
from leaderboard.reference_data import reference_batches
from leaderboard.results import REJECT_REASONS, result_document
from leaderboard.votes_file import iter_batches
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import read_committed_consumer_config, send
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics, ensure_topics
from txstream.runtime.task import PartitionTask
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.supervisor import Policy, Supervised

# the sends are by hand: reference data goes to every partition (`raw_batches`)
_Raw = tuple[Producer, dict[str, BatchCodec]]

GUARANTEES = "ACID nested transaction per batch; order per partition only; exactly-once"


def merge_boards(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One document from per-partition ones: counts add up; a contestant is current unless
    some partition removed it; removals are listed partition by partition."""
    removed = [r for d in docs for r in d["removed"]]
    gone = {r["contestant_number"] for r in removed}
    votes: dict[int, int] = {}
    trending: dict[int, int] = {}
    for d in docs:
        for row in d["contestants"]:
            votes[row["contestant_number"]] = votes.get(row["contestant_number"], 0)
            votes[row["contestant_number"]] += row["num_votes"]
        for c, n in d["trending_all"]:
            trending[c] = trending.get(c, 0) + n
    current = sorted((c, n) for c, n in votes.items() if c not in gone)
    hot = [(c, n) for c, n in trending.items() if c in dict(current)]
    return {
        "accepted": sum(d["accepted"] for d in docs),
        "rejected": {r: sum(d["rejected"][r] for d in docs) for r in REJECT_REASONS},
        "contestants": [{"contestant_number": c, "num_votes": n} for c, n in current],
        "removed": removed,
        "top3": [[c, n] for c, n in sorted(current, key=lambda x: (-x[1], x[0]))[:3]],
        "bottom3": [[c, n] for c, n in sorted(current, key=lambda x: (x[1], -x[0]))[:3]],
        "trending3": [[c, n] for c, n in sorted(hot, key=lambda x: (-x[1], x[0]))[:3]],
    }


def _board(tables: dict[str, Any]) -> dict[str, Any]:
    doc = result_document(tables)
    doc["trending_all"] = [
        (int(k[0]), int(r["value"])) for k, r in tables.get("trending", {}).items()
    ]
    return doc


def _load_reference(loader: _Raw, topics: AppTopics, partitions: int, params: Params) -> None:
    """Contestants and area codes, as batch 1 of their streams on every partition."""
    producer, codecs = loader
    batches = reference_batches(params.contestants)
    producer.begin_transaction()
    for p in range(partitions):
        for stream, tuples in batches.items():
            value = codecs[stream].encode(stream, 1, tuples)
            send(producer, topics.stream(stream), value, partition=p)
    producer.commit_transaction()


def _load_votes(
    loader: _Raw, topic: str, votes: Path, batch_size: int, partitions: int
) -> tuple[dict[int, int], int]:
    """The votes, by phone number; returns the last batch id sent to each partition, and the
    number of batches."""
    producer, codecs = loader
    codec = codecs["votes"]
    last: dict[int, int] = {}
    count = 0
    producer.begin_transaction()
    for batch in iter_batches(votes, batch_size):
        p = partition_of((batch.votes[0].phone_number,), partitions)
        tuples = [dataclasses.asdict(v) for v in batch.votes]
        send(producer, topic, codec.encode("votes", batch.batch_id, tuples), partition=p)
        last[p] = batch.batch_id
        count += 1
        if count % 10_000 == 0:
            producer.commit_transaction()
            producer.begin_transaction()
    producer.commit_transaction()
    return last, count


def _wait(
    settings: Settings,
    topic: str,
    stream: str,
    targets: dict[int, int],
    workers: Sequence[Supervised],
    timeout_s: float,
) -> None:
    """Follow the commit notices until each partition has committed its target batch id of
    `stream`."""
    schema = SchemaRegistry(settings.schema_dir).get("txstream.CommitNotice")
    consumer = Consumer(read_committed_consumer_config(settings, f"wait-{uuid.uuid4().hex}"))
    consumer.assign([TopicPartition(topic, p, 0) for p in targets])
    done = dict.fromkeys(targets, 0)
    deadline = time.monotonic() + timeout_s
    try:
        while any(done[p] < targets[p] for p in targets):
            if time.monotonic() > deadline:
                raise TimeoutError(f"committed {done} of {targets} within {timeout_s:.0f}s")
            if any(w.supervisor.live_pid() is None for w in workers):
                raise RuntimeError("a worker's supervisor is gone; see its log")
            for msg in consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    notice: Any = decode_record(schema, msg.value() or b"")
                    last = int(notice["last_batch_ids"].get(stream, 0))
                    p = msg.partition() or 0
                    done[p] = max(done.get(p, 0), last)
    finally:
        consumer.close()


def run(
    settings: Settings,
    votes: Path,
    params: Params,
    batch_size: int,
    partitions: int,
    timeout_s: float,
    tags: list[str],
) -> Measured:
    app = build_app(params, name=f"bench-part-{uuid.uuid4().hex[:8]}")
    tags.append(app.name)
    topics = AppTopics(app.name)
    ensure_topics(TopicAdmin(settings), topics, app.decl.streams, partitions=partitions)
    loader = (transactional_producer(settings, app), codecs_of(settings, app))
    spec = json.dumps({**dataclasses.asdict(params), "name": app.name})
    workers = [
        Supervised(
            f"{app.name}-w{i}",
            [
                str(Path(sys.executable).with_name("txstream")),
                "worker",
                "run",
                "--app",
                "leaderboard.dataflow:from_params",
                "--params",
                spec,
                "--instance-id",
                str(i),
                "--no-metrics",
            ],
            settings,
            policy=Policy(max_restarts=0),
        )
        for i in range(partitions)
    ]
    try:
        for w in workers:
            w.start()
        _load_reference(loader, topics, partitions, params)
        ready = dict.fromkeys(range(partitions), 1)
        _wait(settings, topics.commits, "contestant_rows", ready, workers, 120)
        started = time.monotonic()
        last, count = _load_votes(loader, topics.stream("votes"), votes, batch_size, partitions)
        _wait(settings, topics.commits, "votes", last, workers, timeout_s)
        elapsed = time.monotonic() - started
    finally:
        for w in workers:
            w.stop()
    boards = []
    for p in range(partitions):
        task = PartitionTask(app, p, settings)
        task.open()
        try:
            boards.append(_board(task.tables()))
        finally:
            task.close()
    return Measured(
        f"txstream, ordering relaxed ({partitions} partitions, {partitions} workers)",
        GUARANTEES,
        count,
        elapsed,
        "first batch produced to the commit notice of the last (worker start-up excluded)",
        merge_boards(boards),
    )
