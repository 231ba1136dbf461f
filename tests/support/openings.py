"""Bank accounts opened on the real broker, each on the partition that owns it, transfers
(a spanning stream's input) sent to every partition or only to those they touch, and their
outcomes read back."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Producer

from txstream.config import Settings
from txstream.kafka.clients import send
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.routing import LEADER_KEY, partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Record
from txstream.schemas.codec import BatchCodec


def send_openings(
    producer: Producer,
    topics: AppTopics,
    codec: BatchCodec,
    opening: dict[int, int],
    partitions: int,
    after: Sequence[int] = (),
) -> list[int]:
    """One `opens` batch per account, numbered on from `after[p]` on partition p (0 if not
    given); the number of batches each partition got."""
    per_partition = [0] * partitions
    for a, balance in opening.items():
        p = partition_of((a,), partitions)
        per_partition[p] += 1
        row = [{"account": a, "balance": balance}]
        value = codec.encode("opens", (after[p] if after else 0) + per_partition[p], row)
        send(producer, topics.stream("opens"), value, partition=p)
    return per_partition


def send_broadcast(
    producer: Producer,
    topics: AppTopics,
    codec: BatchCodec,
    batches: Sequence[list[Record]],
    partitions: int,
    first: int = 1,
) -> None:
    """Batch b (from `first`) of `transfers` to every partition: each engine sees every
    batch."""
    for b, batch in enumerate(batches, first):
        value = codec.encode("transfers", b, batch)
        for p in range(partitions):
            send(producer, topics.stream("transfers"), value, partition=p)


def send_routed(
    producer: Producer,
    topics: AppTopics,
    codec: BatchCodec,
    batches: Sequence[list[Record]],
    partitions: int,
    first: int = 1,
) -> None:
    """Batch b (from `first`) of `transfers` to the partitions owning a payer or payee of
    it (the lowest one's copy keyed `LEADER_KEY`), then a progress mark of the last id to
    each partition that did not get that batch: as a routing producer writes them (placed
    here from the keys, apart from the library)."""
    last = [0] * partitions
    top = first + len(batches) - 1
    for b, batch in enumerate(batches, first):
        value = codec.encode("transfers", b, batch)
        owners = {partition_of((t[k],), partitions) for t in batch for k in ("payer", "payee")}
        for p in sorted(owners):
            key = LEADER_KEY if p == min(owners) else None
            send(producer, topics.stream("transfers"), value, key=key, partition=p)
            last[p] = b
    mark = codec.encode("__progress__", top, [])
    for p in range(partitions):
        if last[p] < top:
            send(producer, topics.stream("transfers"), mark, partition=p)


def transfer_outcomes(
    settings: Settings, topics: AppTopics, codec: BatchCodec, partitions: int
) -> dict[int, str]:
    """Each transfer's committed outcome, refusing a second one."""
    got: dict[int, str] = {}
    for p in range(partitions):
        for msg in read_to_committed_end(settings, topics.stream("transfer_outcomes"), p):
            for t in codec.decode(msg.value() or b"").tuples:
                assert t["seq"] not in got, f"transfer {t['seq']} reported twice"
                got[t["seq"]] = t["outcome"]
    return got
