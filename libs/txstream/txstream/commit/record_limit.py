"""Kafka's record size limit, applied to each TE as it ends rather than at the group commit.

A record larger than the producer takes fails the whole group commit, and the restarted
engine would fail on the same batch again. So each TE's output batches are encoded when it
ends (the commit path sends those bytes, encoding them only once) and each row it wrote is
measured for the changelog: a TE with too large a record aborts, like any other abort, and
the engine goes on with the next batch.

Rows are not encoded here (the group commit encodes a row once, however often the group
writes it): a cheap upper bound on a row's encoded size clears almost every row, and only
a row the bound cannot clear is encoded to be measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from txstream.engine.group import OutputBatch
from txstream.engine.writeset import TOMBSTONE, WriteSet
from txstream.kafka.topics import AppTopics
from txstream.model.errors import TxnAbort
from txstream.schemas.codec import BatchCodec
from txstream.state.codec import StateCodec

# Bytes librdkafka counts on top of a record's key and value (its v2 framing, at most 36):
# the producer is allowed this much more than the limit the engine enforces.
RECORD_FRAMING = 64
# An upper bound on any scalar's Avro encoding with its union branch: a long is at most 10
# bytes, a double 8, a logical type (decimal, uuid, timestamp) a few dozen.
_SCALAR = 64
_NUMBERS = frozenset({int, float, bool, type(None)})


class RecordLimit:
    """The engine's `Seal`: outputs encoded, and every record checked against `limit` bytes
    (key and value), the producer's message.max.bytes less its framing."""

    def __init__(
        self,
        limit: int,
        topics: AppTopics,
        batch_codecs: Mapping[str, BatchCodec],
        codec: StateCodec,
    ) -> None:
        self.limit = limit
        self.topics = topics
        self.batch_codecs = batch_codecs
        self.codec = codec

    def __call__(self, ws: WriteSet, outputs: list[OutputBatch]) -> list[OutputBatch]:
        sealed = []
        for out in outputs:
            record = self.batch_codecs[out.stream].encode(out.stream, out.batch_id, out.tuples)
            self._check(self.topics.stream(out.stream), len(record))
            sealed.append(replace(out, record=record))
        for table, rows in ws.tables.items():
            for key, row in rows.items():
                if row is TOMBSTONE or _row_bound(table, key, row) <= self.limit:
                    continue
                size = len(self.codec.key(table, key)) + len(self.codec.encode_row(table, row))
                self._check(self.topics.changelog, size)
        return sealed

    def _check(self, topic: str, size: int) -> None:
        if size > self.limit:
            raise TxnAbort("output_too_large", f"{topic} {size} > {self.limit}")


def _row_bound(table: str, key: tuple[object, ...], row: Mapping[str, object]) -> int:
    """At least the length of the changelog record of `row` at `key`; flat (no call per
    value) for the usual parts and values, numbers and strings."""
    n = 4 * len(table) + _SCALAR * (2 + len(key) + len(row))
    for v in (*key, *row.values()):
        t = type(v)
        if t is str:
            n += 4 * len(v)  # type: ignore[arg-type]
        elif t not in _NUMBERS:
            n += _bound(v)
    return n


def _bound(value: object) -> int:
    """At least the Avro (or state key) encoding's length of `value`: a string is at most
    4 bytes a character, and every value, item or entry gets a scalar's room for its
    length, count or union branch."""
    t = type(value)
    if t in _NUMBERS:
        return _SCALAR
    if t is str:
        return _SCALAR + 4 * len(value)  # type: ignore[arg-type]
    if t is bytes or t is bytearray:
        return _SCALAR + len(value)  # type: ignore[arg-type]
    if t is list or t is tuple or isinstance(value, list | tuple | set | frozenset):
        n = _SCALAR
        for v in value:  # type: ignore[attr-defined]
            n += _bound(v)
        return n
    if isinstance(value, Mapping):
        n = _SCALAR
        for k, v in value.items():
            n += _bound(k) + _bound(v)
        return n
    return _SCALAR
