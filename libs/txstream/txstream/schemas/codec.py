"""Atomic batches to and from Kafka record values: one envelope per record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from io import BytesIO
from typing import Any, Final, final

from fastavro import schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from fastavro.types import Schema

from txstream.schemas.envelope import envelope_schema
from txstream.schemas.registry import SchemaError
from txstream.schemas.validation import find_error
from txstream.schemas.writers import Fields, flat_fields, write_long, write_records, write_string

# The Kafka header that names a record's writer schema (its tuple schema's fingerprint), so a
# reader whose schema has moved on can still resolve old records against the one they had.
WRITER_HEADER = "txstream.schema-fp"


def schema_fingerprint(parsed: Schema) -> str:
    """Avro's CRC-64-AVRO fingerprint of a parsed schema's canonical form, in hex."""
    return str(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


class BatchEncodeError(SchemaError):
    """A batch whose tuples do not fit the stream's tuple schema."""


class BatchDecodeError(SchemaError):
    """Bytes that are not an envelope of this codec's tuple schema."""


@final
class Batch:
    """A decoded envelope. A class of its own rather than a frozen dataclass: one is made per
    input record, and compiled by mypyc it is made in a tenth of the time (0.07 µs against
    0.76), its attributes still read-only (`Final`)."""

    __slots__ = ("batch_id", "stream", "tuples")

    def __init__(self, stream: str, batch_id: int, tuples: list[dict[str, Any]]) -> None:
        self.stream: Final = stream
        self.batch_id: Final = batch_id
        self.tuples: Final = tuples

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return (self.stream, self.batch_id, self.tuples) == (
            other.stream,
            other.batch_id,
            other.tuples,
        )

    def __repr__(self) -> str:
        return f"Batch(stream={self.stream!r}, batch_id={self.batch_id}, tuples={self.tuples!r})"


class BatchCodec:
    """One stream's envelope codec; build it once per tuple schema and reuse it.

    Encoding does not validate up front, which would double its cost; a failed write is
    explained afterwards by locating the offending field. Tuples of scalars are written by
    the tuple schema's own field writers (`schemas.writers`), and any batch they do not
    take by fastavro.
    """

    def __init__(self, tuple_schema: Schema) -> None:
        self.schema = envelope_schema(tuple_schema)
        tuples = next(f for f in self.schema["fields"] if f["name"] == "tuples")
        self.tuple_schema: dict[str, Any] = tuples["type"]["items"]  # parsed
        self.tuple_name: str = self.tuple_schema["name"]
        self.fingerprint = schema_fingerprint(self.tuple_schema)
        self.headers = [(WRITER_HEADER, self.fingerprint.encode())]
        self._fields = flat_fields(self.tuple_schema)
        self._heads: dict[str, bytes] = {}  # stream name -> its encoding, the envelope's head

    def encode(self, stream: str, batch_id: int, tuples: Sequence[Mapping[str, Any]]) -> bytes:
        if self._fields is not None:
            try:
                return self._encode_flat(self._fields, stream, batch_id, tuples)
            except Exception:
                pass  # fastavro writes it, or says why it cannot
        envelope = {"stream": stream, "batch_id": batch_id, "tuples": tuples}
        out = BytesIO()
        try:
            schemaless_writer(out, self.schema, envelope)
        except Exception as e:
            problem = find_error(envelope, self.schema) or e
            raise BatchEncodeError(
                f"batch {batch_id!r} of stream {stream!r} does not fit {self.tuple_name}: {problem}"
            ) from e
        return out.getvalue()

    def _encode_flat(
        self, fields: Fields, stream: str, batch_id: int, tuples: Sequence[Mapping[str, Any]]
    ) -> bytes:
        head = self._heads.get(stream)
        if head is None:
            out = bytearray()
            write_string(out, stream)
            head = self._heads[stream] = bytes(out)
        out = bytearray(head)
        write_long(out, batch_id)
        write_records(out, fields, tuples)
        return bytes(out)

    def decode(self, data: bytes, writer: BatchCodec | None = None) -> Batch:
        """The envelope in `data`, written with `writer`'s tuple schema (default: this
        codec's), its tuples resolved to this codec's by Avro's rules."""
        buf = BytesIO(data)
        written = self.schema if writer is None else writer.schema
        try:
            record: Any = schemaless_reader(buf, written, self.schema if writer else None)
        except Exception as e:
            raise BatchDecodeError(
                f"not a batch envelope of {self.tuple_name}: {type(e).__name__}: {e}"
            ) from e
        if buf.tell() != len(data):
            raise BatchDecodeError(
                f"not a batch envelope of {self.tuple_name}: "
                f"{len(data) - buf.tell()} bytes left over after the envelope"
            )
        return Batch(record["stream"], record["batch_id"], record["tuples"])
