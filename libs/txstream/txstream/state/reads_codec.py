"""The wire form of a spanning batch's reads (`engine.spanning.Reads`) on the exchange topic.

Rows travel in their tables' own schemas, keyed as in the changelog, so a receiver decodes
them exactly as it would its own state. A leading type byte marks the record as reads: a
stray record of any other kind on the topic fails to decode instead of passing for one.
Several batches' reads for one receiver travel packed in one record (`pack`): a record
costs the sender, the broker and the receiver far more than its bytes do.
"""

from __future__ import annotations

import struct
from typing import Any

from txstream.engine.spanning import Reads
from txstream.schemas.records import decode_record, encode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec

TYPE_BYTE = b"X"
PACKED_BYTE = b"Z"  # a packed record: each part a 4-byte length, then one reads record
_LENGTH = struct.Struct(">I")
ROW_OVERHEAD = 8  # Avro's length prefixes and union branch, per row, at most


class ReadsDecodeError(ValueError):
    """Bytes on the exchange topic that are not spanning reads of this app."""


class ReadsCodec:
    def __init__(self, codec: StateCodec, registry: SchemaRegistry) -> None:
        self._codec = codec
        self._schema = registry.get("txstream.SpanReads")

    def encode(self, reads: Reads, max_bytes: int = 1 << 62) -> list[bytes]:
        """The reads as records of at most about `max_bytes` each (one, unless the rows
        need more); every record holds at least one row."""
        c = self._codec
        chunks: list[list[dict[str, bytes | None]]] = [[]]
        size = 0
        for (table, key), row in reads.rows.items():
            entry = {"key": c.key(table, key),
                     "row": None if row is None else c.encode_row(table, row)}  # fmt: skip
            n = len(entry["key"] or b"") + len(entry["row"] or b"") + ROW_OVERHEAD
            if chunks[-1] and size + n > max_bytes:
                chunks.append([])
                size = 0
            chunks[-1].append(entry)
            size += n
        head = {"stream": reads.stream, "batch_id": reads.batch_id, "sender": reads.sender}
        return [
            TYPE_BYTE
            + encode_record(self._schema, {**head, "part": i, "parts": len(chunks), "rows": rows})
            for i, rows in enumerate(chunks)
        ]

    @staticmethod
    def pack(records: list[bytes], max_bytes: int = 1 << 62) -> list[bytes]:
        """Reads records (from `encode`) packed into as few records of at most about
        `max_bytes` as they fit in; a lone record goes as it is."""
        out: list[bytes] = []
        group: list[bytes] = []
        size = 0
        for r in records:
            if group and size + len(r) + _LENGTH.size > max_bytes:
                out.append(_packed(group))
                group, size = [], 0
            group.append(r)
            size += len(r) + _LENGTH.size
        if group:
            out.append(_packed(group))
        return out

    def decode_all(self, data: bytes) -> list[Reads]:
        """The reads a record holds: one, or, packed, each in the order packed."""
        if data[:1] != PACKED_BYTE:
            return [self.decode(data)]
        out, at = [], 1
        while at < len(data):
            if at + _LENGTH.size > len(data):
                raise ReadsDecodeError(f"undecodable packed reads: cut short at byte {at}")
            (n,) = _LENGTH.unpack_from(data, at)
            at += _LENGTH.size
            if at + n > len(data):
                raise ReadsDecodeError(f"undecodable packed reads: a part of {n} bytes at "
                                       f"byte {at} runs past the end")  # fmt: skip
            out.append(self.decode(data[at : at + n]))
            at += n
        return out

    def decode(self, data: bytes) -> Reads:
        if data[:1] != TYPE_BYTE:
            raise ReadsDecodeError(f"not spanning reads: type byte {data[:1]!r}, not {TYPE_BYTE!r}")
        try:
            record: Any = decode_record(self._schema, data[1:])
            rows = {}
            for r in record["rows"]:
                table, key = self._codec.describe(r["key"])
                value = r["row"]
                rows[(table, key)] = None if value is None else self._codec.decode_row(table, value)
        except (ValueError, TypeError, EOFError, KeyError, IndexError) as e:
            raise ReadsDecodeError(f"undecodable spanning reads: {e}") from e
        return Reads(record["stream"], record["batch_id"], record["sender"], rows,
                     record["part"], record["parts"])  # fmt: skip


def _packed(group: list[bytes]) -> bytes:
    if len(group) == 1:
        return group[0]
    return PACKED_BYTE + b"".join(_LENGTH.pack(len(r)) + r for r in group)
