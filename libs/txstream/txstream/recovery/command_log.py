"""The command log record of one group commit, in Avro (`txstream.CommandLog`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fastavro.types import Schema

from txstream.engine.group import JournalEntry
from txstream.model.declarations import RecoveryMode
from txstream.schemas.records import decode_record, encode_record
from txstream.schemas.registry import SchemaRegistry


@dataclass
class LogRecord:
    entries: list[JournalEntry]
    positions: dict[str, int] = field(default_factory=dict)


class CommandLogCodec:
    def __init__(self, registry: SchemaRegistry, app: str, partition: int, mode: RecoveryMode):
        if not mode.logged:
            raise ValueError(f"recovery mode {mode} keeps no command log")
        self.schema: Schema = registry.get("txstream.CommandLog")
        self.app = app
        self.partition = partition
        self.mode = mode

    def encode(self, entries: Sequence[JournalEntry], positions: Mapping[str, int]) -> bytes:
        record = {
            "app": self.app,
            "partition": self.partition,
            "mode": self.mode.value,
            "entries": [asdict(e) for e in entries],
            "positions": dict(positions),
        }
        return encode_record(self.schema, record)

    def decode(self, data: bytes) -> LogRecord:
        record: Any = decode_record(self.schema, data)
        if record["mode"] != self.mode.value:
            raise ValueError(
                f"command log of {self.app} partition {self.partition} was written in "
                f"{record['mode']} mode, but the app now runs in {self.mode} mode"
            )
        return LogRecord([JournalEntry(**e) for e in record["entries"]], record["positions"])
