"""Kafka's record size limit, applied to each TE (or nested transaction) as it ends rather
than at the group commit.

A record larger than the producer takes fails the whole group commit, and the restarted
engine would fail on the same batch again. So each TE's output batches are encoded when it
ends (the commit path sends those bytes, encoding them only once) and each row it wrote is
measured for the changelog: a TE with too large a record aborts, like any other abort, and
the engine goes on with the next batch.

Rows are not encoded here (the group commit encodes a row once, however often the group
writes it): a cheap upper bound on a row's encoded size, mostly worked out from the
table's schema in advance, clears almost every row, and only a row the bound cannot clear
is encoded to be measured.
"""

from __future__ import annotations

from collections.abc import Mapping

from txstream.engine.group import OutputBatch
from txstream.engine.writeset import TOMBSTONE, WriteSet
from txstream.kafka.topics import AppTopics
from txstream.model.declarations import Key, Record
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
    """The engine's `RecordCheck`: outputs encoded, and every record checked against `limit` bytes
    (key and value), the producer's message.max.bytes less its framing."""

    def __init__(
        self,
        limit: int,
        topics: AppTopics,
        batch_codecs: Mapping[str, BatchCodec],
        codec: StateCodec,
    ) -> None:
        # Checked: every state write is encoded here, so a row that does not match its
        # table's schema, or a window state too large, aborts its TE. Turned on only after
        # a group commit met such a write (`group_commit.UnencodableState`): encoding rows
        # here costs what the bounds save, and the group commit encodes them anyway.
        self.checked = False
        self.limit = limit
        self.batch_codecs = batch_codecs
        self.codec = codec
        self.topics = topics
        self.changelog = topics.changelog
        self.stream_topics = {stream: topics.stream(stream) for stream in batch_codecs}
        self.bounds = {table: RowBound(table, schema) for table, schema in codec.tables.items()}

    def __call__(self, ws: WriteSet, outputs: list[OutputBatch]) -> list[OutputBatch]:
        sealed = []
        limit = self.limit
        for out in outputs:
            record = self.batch_codecs[out.stream].encode(out.stream, out.batch_id, out.tuples)
            if len(record) > limit:
                topic = (
                    self.stream_topics[out.stream] if out.hop is None else self.topics.hop(out.hop)
                )
                self._abort(topic, len(record))
            sealed.append(
                OutputBatch(out.stream, out.batch_id, out.tuples, record, out.hop, out.partition)
            )
        if self.checked:
            self._check_encoded(ws)
            return sealed
        for table, rows in ws.tables.items():
            bound = self.bounds.get(table)
            for key, row in rows.items():
                if row is not TOMBSTONE and (bound is None or bound.size(key, row) > limit):
                    self._check_row(table, key, row)
        return sealed

    def _check_encoded(self, ws: WriteSet) -> None:
        for table, rows in ws.tables.items():
            for key, row in rows.items():
                if row is not TOMBSTONE:
                    self._check_row(table, key, row)
        for name, state in ws.windows.items():
            codec = self.codec
            try:
                size = len(codec.window_key(name)) + len(codec.encode_window(name, state))
            except Exception as e:
                raise TxnAbort("invalid_row", f"window {name!r}: {e}") from e
            if size > self.limit:
                self._abort(self.changelog, size)

    def _check_row(self, table: str, key: Key, row: Record) -> None:
        """Encode the row to measure it; one that does not match its schema aborts too."""
        codec = self.codec
        try:
            size = len(codec.key(table, key)) + len(codec.encode_row(table, row))
        except Exception as e:
            raise TxnAbort("invalid_row", f"table {table!r} key {key!r}: {e}") from e
        if size > self.limit:
            self._abort(self.changelog, size)

    def _abort(self, topic: str, size: int) -> None:
        raise TxnAbort("output_too_large", f"{topic} {size} > {self.limit}")


class RowBound:
    """An upper bound on the changelog record of one table's row, worked out from the
    table's schema once: its fixed-size fields (numbers, booleans, enums, fixed) add a
    constant, so only its strings, bytes and collections are looked at, row by row.

    The bound holds for rows that match the schema; a row that does not cannot be encoded
    at all, whatever its size."""

    def __init__(self, table: str, schema: object) -> None:
        fields = schema.get("fields") if isinstance(schema, dict) else None
        self.variable: tuple[str, ...] | None = None
        self.fixed = 4 * len(table) + 2 * _SCALAR
        if fields is None:
            return  # not a record: every value is looked at
        variable = []
        for f in fields:
            size = _fixed_size(f["type"])
            if size is None:
                variable.append(f["name"])
            else:
                self.fixed += size
            if "default" in f:
                self.fixed += _bound(f["default"])
        self.variable = tuple(variable)

    def size(self, key: Key, row: Mapping[str, object]) -> int:
        """At least the length of the changelog record (key and value) of `row` at `key`."""
        n = self.fixed + _SCALAR * len(key)
        parts: tuple[object, ...] = key  # bytes too, which `Key` does not name
        for part in parts:
            if type(part) is int:
                continue
            if isinstance(part, str):
                n += 4 * len(part)
            elif isinstance(part, bytes):  # a NUL is escaped to two bytes
                n += 2 * len(part)
        if self.variable is None:
            for v in row.values():
                n += _bound(v)
        else:
            for name in self.variable:
                n += _bound(row.get(name))
        return n


def _fixed_size(avro_type: object) -> int | None:
    """At least the encoded size of every value of a fixed-size Avro type; None if the size
    depends on the value (strings, bytes, collections, records, named references)."""
    if isinstance(avro_type, list):  # a union: its branch index, then the largest branch
        sizes = [_fixed_size(t) for t in avro_type]
        return None if None in sizes else _SCALAR + max(s for s in sizes if s is not None)
    if isinstance(avro_type, dict):
        kind = avro_type.get("type")
        if kind == "fixed":
            return int(avro_type["size"])
        if kind == "enum":
            return _SCALAR
        if "logicalType" in avro_type or kind in _FIXED_PRIMITIVES:
            return _fixed_size(kind)
        return None
    return _SCALAR if avro_type in _FIXED_PRIMITIVES else None


_FIXED_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double"})


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
