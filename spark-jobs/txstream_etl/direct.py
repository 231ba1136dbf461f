"""A small facts micro-batch read from Kafka by the driver itself, not by a Spark job.

Spark plans each micro-batch before running it: its offset ranges are in the query's offset
log (`offsets.py`). Below the last stable offset every transaction is decided, so reading
those ranges read_committed gives exactly the records Spark's Kafka source would give. For
a few hundred records, Spark's job was the micro-batch's fixed cost: a task, its Python
worker's input from the JVM, and on a cluster a remote executor; 1-1.5 s on two cores. Here
it is one fetch per partition and the same decoder (`decode.decode_records`).

Spark still owns the query: its offsets, its checkpoint, its commit after `foreachBatch`
returns. A read that does not reach a range's end in time hands the micro-batch back to
Spark's job, as does any plan with a changelog (whose records Spark filters first).
"""

from __future__ import annotations

import logging
import time
import uuid

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from txstream.commit.markers import COMMIT_END_HEADER
from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.kafka.routing import LEADER_KEY
from txstream.schemas.codec import WRITER_HEADER
from txstream_etl.decode import KafkaRecord, decode_records
from txstream_etl.offsets import Planned
from txstream_etl.plan import ChangelogSource, Plan, StreamSource

log = logging.getLogger("txstream.etl")

_POLL_S = 0.02
TIMEOUT_S = 10.0  # past this, Spark's job reads the micro-batch instead


def readable(plan: Plan) -> bool:
    """Whether the driver reads this plan's micro-batches as Spark would: no changelog."""
    return not any(isinstance(s, ChangelogSource) for s in plan.sources.values())


class DirectReader:
    """One consumer for a query's run, assigned each micro-batch's ranges in turn."""

    def __init__(self, settings: Settings, plan: Plan, timeout_s: float = TIMEOUT_S) -> None:
        if not readable(plan):
            raise ValueError("a changelog's micro-batches are read by Spark")
        self.plan = plan
        self.timeout_s = timeout_s
        conf = read_committed_consumer_config(settings, f"txstream-etl-direct-{uuid.uuid4().hex}")
        conf |= {"enable.partition.eof": True, "fetch.wait.max.ms": 10,
                 "auto.offset.reset": "error"}  # fmt: skip
        self.consumer = Consumer(conf)

    def read(self, planned: Planned) -> pa.Table | None:
        """The micro-batch's decoded rows (`decode.DECODED`); None: Spark's job is to read
        it (`records`)."""
        records = self.records(planned)
        if records is None:
            return None
        return pa.Table.from_batches([decode_records(self.plan, records)])

    def records(self, planned: Planned) -> list[KafkaRecord] | None:
        """The micro-batch's committed records, by partition in offset order; None when
        Kafka refused a range (its records deleted: Spark's `failOnDataLoss` decides) or did
        not give it in time."""
        ranges = [r for r in planned.ranges() if self._wanted(r[0], r[1])]
        firsts = {(topic, partition): first or 0 for topic, partition, first, _ in ranges}
        ends = {(topic, partition): end for topic, partition, _, end in ranges}
        self.consumer.assign([
            TopicPartition(t, p, OFFSET_BEGINNING if first is None else first)
            for t, p, first, _ in ranges
        ])  # fmt: skip
        records: list[KafkaRecord] = []
        deadline = time.monotonic() + self.timeout_s
        while ends:
            if time.monotonic() > deadline:
                log.warning("reading %s took over %.0f s: Spark reads it", planned.end,
                            self.timeout_s)  # fmt: skip
                return None
            for msg in self.consumer.consume(10_000, timeout=_POLL_S):
                topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                if topic is None or partition is None or offset is None:
                    continue  # the client's own error: it retries, and the deadline bounds it
                at = (topic, partition)
                if at not in ends:
                    continue  # a partition read to its end already
                error = msg.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s[%d]: %s: Spark reads it", topic, partition, error)
                    return None
                if offset >= ends[at]:
                    del ends[at]
                elif error is None and offset >= firsts[at] and self._taken(msg, topic, partition):
                    records.append(_record(msg, topic, partition, offset))
        return sorted(records, key=lambda r: (r.topic, r.partition, r.offset))

    def close(self) -> None:
        self.consumer.close()

    def _wanted(self, topic: str, partition: int) -> bool:
        """The partitions Spark's query reads."""
        return topic in self.plan.sources

    def _taken(self, msg: Message, topic: str, partition: int) -> bool:
        """Whether Spark's query takes the record: of a spanning procedure's input, one copy
        of each batch (partition 0's when broadcast, else its lowest participant's, keyed
        `LEADER_KEY`)."""
        source = self.plan.sources.get(topic)
        if not (isinstance(source, StreamSource) and source.broadcast):
            return True
        return partition == 0 or msg.key() == LEADER_KEY


def _record(msg: Message, topic: str, partition: int, offset: int) -> KafkaRecord:
    """The fields Spark's query selects from a Kafka record (`job.start_query`)."""
    headers = msg.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    writer = next((v for k, v in pairs if k == WRITER_HEADER), None)
    ends = [v for k, v in pairs if k == COMMIT_END_HEADER]
    return KafkaRecord(
        topic,
        partition,
        offset,
        msg.timestamp()[1],
        msg.key(),
        msg.value(),
        _text(writer),
        bool(ends),
        _text(ends[0]) if ends else None,
    )


def _text(value: str | bytes | None) -> str | None:
    """A header's value as Spark's `cast("string")` gives it."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
