"""Kafka records to routed warehouse rows, in plain Python, as Spark's Python workers run it.

Each input record yields rows `{table, row, deleted, batch_id, seq, topic, partition,
offset, kafka_ts_ms, reason, detail, payload}`: `row` is the JSON of a cleaned row (typed
later by Spark against the table's schema); a row with a `reason` goes to quarantine instead.
A record that cannot be decoded at all yields one quarantine row for its source's table, so
nothing read is silently dropped.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from fastavro.types import Schema

from txstream.commit.markers import spans_of
from txstream.schemas.codec import BatchCodec, BatchDecodeError
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.keys import decode_key
from txstream_etl.cut import COMMIT, PREPARED, SPAN, span_txn
from txstream_etl.normalize import Malformed, normalize
from txstream_etl.plan import ChangelogSource, Plan, RawSource, StateTable, StreamSource
from txstream_etl.rules import RULES, Rejected

DECODED = pa.schema(
    [
        ("table", pa.string()),
        ("row", pa.string()),
        ("deleted", pa.bool_()),
        ("batch_id", pa.int64()),
        ("seq", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("kafka_ts_ms", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("payload", pa.string()),
        ("commit_end", pa.bool_()),
    ]
)
"""The Arrow schema of decoded rows; `tables.DECODED_DDL` is the same for Spark."""


@dataclass(frozen=True)
class KafkaRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    writer: str | None = None  # the writer schema's fingerprint (header), if the record has one
    commit_end: bool = False  # a changelog record that ends its engine commit (header)
    spans: str | None = None  # that header's value: the spanning batch parts it holds


@functools.cache
def _registry(schema_dir: str) -> SchemaRegistry:
    return SchemaRegistry(Path(schema_dir))


@functools.cache
def _batch_codec(schema_dir: str, schema: str) -> BatchCodec:
    return BatchCodec(_registry(schema_dir).get(schema))


@functools.cache
def _row_schema(schema_dir: str, schema: str) -> Schema:
    return _registry(schema_dir).get(schema)


def payload_text(data: bytes | None) -> str | None:
    """The raw bytes for a human: text when it is UTF-8, else hex."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex:" + data.hex()


class Decoder:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def decode(self, rec: KafkaRecord) -> Iterator[dict[str, Any]]:
        source = self.plan.sources[rec.topic]
        if isinstance(source, StreamSource):
            yield from self._stream(source, rec)
        elif isinstance(source, ChangelogSource):
            yield from self._changelog(source, rec)
        else:
            yield self._raw(source, rec)

    def _out(self, rec: KafkaRecord, table: str, **fields: Any) -> dict[str, Any]:
        return {
            "table": table,
            "row": None,
            "deleted": False,
            "batch_id": None,
            "seq": 0,
            "topic": rec.topic,
            "partition": rec.partition,
            "offset": rec.offset,
            "kafka_ts_ms": rec.timestamp_ms,
            "reason": None,
            "detail": None,
            "payload": None,
            "commit_end": rec.commit_end,
            **fields,
        }

    def _clean(
        self, rec: KafkaRecord, table: str, rule: str, row: dict[str, Any], **meta: Any
    ) -> dict[str, Any]:
        try:
            clean = RULES[rule](row)
        except Rejected as e:
            return self._out(
                rec, table, reason=e.reason, detail=e.detail, payload=_json(row), **meta
            )
        return self._out(rec, table, row=_json(clean), **meta)

    def _stream(self, source: StreamSource, rec: KafkaRecord) -> Iterator[dict[str, Any]]:
        codec = _batch_codec(self.plan.schema_dir, source.schema)
        try:
            batch = codec.decode(rec.value or b"", _writer(codec, source, rec))
        except BatchDecodeError as e:
            yield self._undecodable(rec, source.table, str(e))
            return
        for seq, row in enumerate(batch.tuples):
            row = _renamed(row, source.rename)
            yield self._clean(rec, source.table, source.rule, row, batch_id=batch.batch_id, seq=seq)

    def _changelog(self, source: ChangelogSource, rec: KafkaRecord) -> Iterator[dict[str, Any]]:
        try:
            parts = decode_key(rec.key or b"")
        except ValueError as e:
            yield self._undecodable(rec, "changelog", f"state key: {e}")
            return
        for span in spans_of(rec.spans) if rec.commit_end else ():
            part = {"txn": span_txn(span), "parts": list(span.participants)}
            yield self._out(rec, SPAN, row=_json(part), deleted=True)
        table = str(parts[0]) if parts else None
        if table == PREPARED:  # the consistent cut's (`cut.py`): which 2PC, and whether applied
            yield self._out(rec, PREPARED, row=str(parts[1]), deleted=rec.value is None)
            return
        target = source.tables.get(table) if table is not None else None
        if target is None:
            # engine-internal state (windows, counters of the runtime) or not mapped; the
            # end of a commit still counts for the cut
            if rec.commit_end:
                yield self._out(rec, COMMIT)
            return
        key = _named_key(target, parts[1:])
        if rec.value is None:
            yield self._out(rec, target.table, row=_json(key), deleted=True)
            return
        try:
            row = decode_record(_row_schema(self.plan.schema_dir, target.schema), rec.value)
        except Exception as e:  # fastavro raises many types for bytes that are not the schema
            yield self._undecodable(rec, target.table, f"{type(e).__name__}: {e}")
            return
        yield self._clean(rec, target.table, target.rule, _renamed({**row, **key}, target.rename))

    def _raw(self, source: RawSource, rec: KafkaRecord) -> dict[str, Any]:
        try:
            row = normalize(rec.value or b"")
        except Malformed as e:
            return self._out(
                rec, source.table, reason=e.reason, detail=e.detail, payload=payload_text(rec.value)
            )
        return self._clean(rec, source.table, source.rule, row)

    def _undecodable(self, rec: KafkaRecord, table: str, detail: str) -> dict[str, Any]:
        return self._out(
            rec, table, reason="undecodable", detail=detail, payload=payload_text(rec.value)
        )


class UnknownWriterSchema(RuntimeError):
    """A record written with a schema this run was not given: fails the micro-batch (nothing
    of it is written) rather than guess; a restart reads the schemas topic again."""


@functools.cache
def _codec_of(avsc: str) -> BatchCodec:
    return BatchCodec(json.loads(avsc))


def _writer(reader: BatchCodec, source: StreamSource, rec: KafkaRecord) -> BatchCodec | None:
    """The codec of the schema the record was written with, None if it is the reader's own
    (or the record names none: written before records carried it)."""
    if rec.writer is None or rec.writer == reader.fingerprint:
        return None
    avsc = dict(source.writers).get(rec.writer)
    if avsc is None:
        raise UnknownWriterSchema(
            f"{rec.topic} partition {rec.partition} offset {rec.offset} was written with tuple "
            f"schema {rec.writer}, which the app's schemas topic did not hold when this ETL "
            f"run started: restart it (a worker publishes its schemas as it starts)"
        )
    return _codec_of(avsc)


def _named_key(target: StateTable, parts: tuple[Any, ...]) -> dict[str, Any]:
    names = target.key_columns
    if len(parts) > len(names):
        head = len(names) - 1
        parts = (*parts[:head], ":".join(str(p) for p in parts[head:]))
    return {name: parts[i] if i < len(parts) else None for i, name in enumerate(names)}


def _renamed(row: dict[str, Any], rename: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    if not rename:
        return row
    names = dict(rename)
    return {names.get(k, k): v for k, v in row.items()}


def _json(row: dict[str, Any]) -> str:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)


def imported(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A `mapInArrow` function that only has a Python worker import this module (its
    unpickling does): `job.warm_python_workers`."""
    yield from batches


def decode_arrow(plan: Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The `mapInArrow` function: Kafka columns in, `DECODED` rows out."""
    for batch in batches:
        cols = batch.to_pydict()
        writers = cols.get("writer") or [None] * batch.num_rows
        ends = cols.get("commit_end") or [False] * batch.num_rows
        spans = cols.get("spans") or [None] * batch.num_rows
        yield decode_records(plan, (
            KafkaRecord(
                cols["topic"][i],
                cols["partition"][i],
                cols["offset"][i],
                cols["kafka_ts_ms"][i],
                cols["key"][i],
                cols["value"][i],
                writers[i],
                bool(ends[i]),
                spans[i],
            )
            for i in range(batch.num_rows)
        ))  # fmt: skip


def decode_records(plan: Plan, records: Iterable[KafkaRecord]) -> pa.RecordBatch:
    """Kafka records to `DECODED` rows, in their order."""
    decoder = Decoder(plan)
    out: list[dict[str, Any]] = []
    for rec in records:
        out.extend(decoder.decode(rec))
    return pa.RecordBatch.from_pylist(out, schema=DECODED)
