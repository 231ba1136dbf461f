"""Bytes for the engine's state, shared by the changelog topic and RocksDB.

A state key is the order-preserving encoding of (table, *key), so a table is a key range
and a prefix scan is a range scan. Values are schemaless Avro of the table's schema, which
is what the warehouse ETL decodes from the changelog.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastavro import parse_schema
from fastavro.types import Schema

from txstream.engine import windows as win
from txstream.engine.direct import DIRECT_ORDER_TABLE, DIRECT_TABLE
from txstream.engine.epochs import EPOCH_TABLE
from txstream.engine.group import SYS_TABLE
from txstream.engine.participant import PREPARED_TABLE
from txstream.engine.promises import PROMISED_TABLE
from txstream.engine.writeset import TOMBSTONE, WriteSet
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Key, Record
from txstream.schemas.records import RecordEncoder, decode_record, holds_only_scalars
from txstream.schemas.registry import SchemaRegistry
from txstream.state.keys import decode_key, encode_key, prefix
from txstream.state.window_codec import WindowCodec

WINDOW_TABLE = "__window__"
SYS_SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "SysValue",
        "namespace": "txstream",
        "fields": [{"name": "value", "type": "long"}],
    }
)

DIRECT_SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "DirectAnswer",
        "namespace": "txstream",
        "doc": "A direct transaction's answer, or the request id kept n-th (`engine.direct`).",
        "fields": [{"name": "value", "type": "string"}],
    }
)

EPOCH_SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "EpochBefore",
        "namespace": "txstream",
        "doc": "A row as it stood when an epoch began (`engine.epochs`), as JSON.",
        "fields": [{"name": "row", "type": "string"}],
    }
)

PREPARED_SCHEMA = parse_schema(
    {
        "type": "record",
        "name": "PreparedTxn",
        "namespace": "txstream",
        "doc": "A 2PC participant's or a promise's held write set, durable until the "
        "decision arrives.",
        "fields": [
            {"name": "epoch", "type": "long"},
            {"name": "writes", "type": "string"},
            {"name": "request_id", "type": "string"},
            {"name": "reply_to", "type": "string"},
            {"name": "results", "type": "string"},
        ],
    }
)


def _record(schema: Schema) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise TypeError(f"a window's tuple schema must be a record, got {schema!r}")
    return schema


class EncodedWrites(dict[bytes, bytes | None]):
    """A group's state entries (key -> value, None deleting), each with the (table, key)
    it encodes, in the same order: the committed state's caches are keyed by those, and
    must not decode every key back to learn them. A window's is (WINDOW_TABLE, (name,)),
    and its state as its entry decodes is in `windows`. `rows`, in the same order again,
    holds each row the group wrote whose value decodes back to the row itself (fields,
    types and order; `RecordEncoder.encode`), and None for any other entry: the committed
    state keeps those rows, decoded, without decoding them."""

    __slots__ = ("origins", "rows", "windows")

    def __init__(self) -> None:
        super().__init__()
        self.origins: list[tuple[str, Key]] = []
        self.rows: list[Record | None] = []
        self.windows: dict[str, win.WindowState] = {}


class StateCodec:
    def __init__(self, dataflow: Dataflow, registry: SchemaRegistry) -> None:
        decl = dataflow.decl
        self.tables: dict[str, Schema] = {
            t.name: registry.get(t.schema) for t in decl.tables.values()
        }
        self.tables[SYS_TABLE] = SYS_SCHEMA
        self.tables[PREPARED_TABLE] = PREPARED_SCHEMA
        self.tables[PROMISED_TABLE] = PREPARED_SCHEMA
        self.tables[EPOCH_TABLE] = EPOCH_SCHEMA
        self.tables[DIRECT_TABLE] = DIRECT_SCHEMA
        self.tables[DIRECT_ORDER_TABLE] = DIRECT_SCHEMA
        self.row_encoders = {t: RecordEncoder(s) for t, s in self.tables.items()}
        # A record of no fields (a set's membership rows) is zero bytes in Avro.
        self.empty_rows = {
            t: isinstance(s, dict) and s.get("type") == "record" and not s.get("fields")
            for t, s in self.tables.items()
        }
        # Tables whose rows are flat (`rows.is_flat`) whenever they match their schema.
        self.flat_tables = frozenset(t for t, s in self.tables.items() if holds_only_scalars(s))
        self.windows: dict[str, Schema] = {
            w.name: parse_schema(win.state_schema(_record(registry.get(w.schema))))
            for w in decl.windows.values()
        }
        self.window_codecs = {
            w.name: WindowCodec(_record(registry.get(w.schema))) for w in decl.windows.values()
        }
        self._heads: dict[str, int] = {}  # table -> the length of its name, encoded

    def key(self, table: str, key: Key) -> bytes:
        return encode_key((table, *key))

    def prefix(self, table: str, key_prefix: Key) -> bytes:
        return prefix((table, *key_prefix))

    def window_key(self, name: str) -> bytes:
        return encode_key((WINDOW_TABLE, name))

    def encode_row(self, table: str, row: Record) -> bytes:
        return self.row_encoders[table](row)

    def decode_row(self, table: str, data: bytes) -> Record:
        row: Record = decode_record(self.tables[table], data)
        return row

    def encode_window(self, name: str, state: win.WindowState) -> bytes:
        return self.window_codecs[name].encode(state)[0]

    def decode_window(self, name: str, data: bytes) -> win.WindowState:
        return win.from_record(decode_record(self.windows[name], data))

    def encode_writes(self, ws: WriteSet) -> EncodedWrites:
        """The group overlay as changelog/RocksDB entries; None deletes (a tombstone)."""
        out = EncodedWrites()
        origins, kept = out.origins, out.rows
        for table, rows in ws.tables.items():
            encode = self.row_encoders[table].encode
            head = self.prefix(table, ())  # parts are self-delimiting: keys concatenate
            empty = self.empty_rows[table]
            for k, v in rows.items():
                if v is TOMBSTONE:
                    out[head + encode_key(k)] = None
                    kept.append(None)
                elif empty:
                    out[head + encode_key(k)] = b""
                    kept.append(None)
                else:
                    out[head + encode_key(k)], same = encode(v)
                    kept.append(v if same else None)
                origins.append((table, k))
        for name, state in ws.windows.items():
            out[self.window_key(name)], out.windows[name] = self.window_codecs[name].encode(state)
            origins.append((WINDOW_TABLE, (name,)))
            kept.append(None)
        return out

    def row_key(self, table: str, key: bytes) -> Key:
        """The row's key in a state key of `table`: what `describe` gives, decoding only
        the parts after the table's name (parts are self-delimiting)."""
        skip = self._heads.get(table)
        if skip is None:
            skip = self._heads[table] = len(self.prefix(table, ()))
        return decode_key(key[skip:])  # type: ignore[return-value]  # a table's: no bytes

    def describe(self, key: bytes) -> tuple[str, Key]:
        """(table or window-table name, key) of a state key, e.g. for ETL and debugging."""
        parts = decode_key(key)
        return str(parts[0]), tuple(parts[1:])  # type: ignore[arg-type]

    def decode_entry(self, key: bytes, value: bytes) -> tuple[str, Key, Any]:
        table, k = self.describe(key)
        if table == WINDOW_TABLE:
            return table, k, self.decode_window(str(k[0]), value)
        return table, k, self.decode_row(table, value)


def table_rows(codec: StateCodec, entries: Mapping[bytes, bytes]) -> dict[str, dict[Key, Record]]:
    """Group raw state entries by table, decoded: the committed state as plain data."""
    out: dict[str, dict[Key, Record]] = {}
    for key, value in entries.items():
        table, k, v = codec.decode_entry(key, value)
        if table != WINDOW_TABLE:
            out.setdefault(table, {})[k] = v
    return out
