"""An app's warehouse, as a small TOML file: what to load from which topics, and into what.

The job learns an app from this file alone, never from the app's code, so any app can have a
warehouse and the job ships without the apps. Four kinds of entry:

- `[[fact]]`: a stream, appended one row per tuple (`FactTable`); `broadcast = true` for a
  spanning procedure's input, whose batches are written to several partitions: one copy of
  each is loaded;
- `[[mirror]]`: an engine table followed through the changelog (`MirrorTable`);
- `[raw]`: raw client events in several dialects, normalized (`normalize.py`), optional;
- `[snapshot]`: a document computed by SQL over the tables after each micro-batch of the
  changelog query, and `[[aggregate]]`: tables rebuilt by SQL in `etl maintain`.

Every error names the file and the entry at fault.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txstream_etl.rules import RULES
from txstream_etl.tables import FactTable, MirrorTable, SystemTable

SHAPES = ("scalar", "map", "rows", "records")

# A fact table's micro-batch up to this many rows is collected and appended by the driver
# (delta-rs: tens of milliseconds, where Spark's append was 1.5-2.2 s of fixed cost on two
# cores). A larger one, a backfill's or a catch-up's, stays Spark's to write in parallel.
DRIVER_ROWS = 200_000
# A facts micro-batch of up to this many Kafka records is collected into the driver whole,
# its one Spark job the read and the decode (`collected.py`): 1.9-2.5 s a micro-batch at
# 1,000 records/s on two cores, against 3.9-4.4 s counted and typed by Spark. Bounded in
# records, the one size known before the read; at 100 tuples a record, 100-250 MB of rows.
COLLECT_RECORDS = 10_000


class WarehouseConfigError(ValueError):
    """The warehouse file is missing, not TOML, or an entry is incomplete or inconsistent."""


Renames = tuple[tuple[str, str], ...]  # field -> column, where a field's name is taken


@dataclass(frozen=True)
class Fact:
    stream: str
    schema: str  # the tuple schema's full name
    rule: str
    table: FactTable
    rename: Renames = ()
    # a spanning procedure's input: load one copy of each batch (partition 0's when
    # broadcast, else the one keyed `routing.LEADER_KEY`)
    broadcast: bool = False


@dataclass(frozen=True)
class Mirror:
    engine_table: str
    schema: str
    rule: str
    table: MirrorTable
    rename: Renames = ()


@dataclass(frozen=True)
class Raw:
    rule: str
    table: FactTable


@dataclass(frozen=True)
class SnapshotValue:
    """One entry of the snapshot document: a SQL query over the tables, and how to read it:
    `scalar` (first column of the first row), `map` (column 1 -> column 2), `rows` (lists)
    or `records` (objects). With a `column` type (Spark DDL) it also gets a typed column of
    the snapshot table, for SQL readers; the document holds every value as JSON."""

    name: str
    shape: str
    sql: str
    column: str | None = None


@dataclass(frozen=True)
class Snapshot:
    table: SystemTable
    values: tuple[SnapshotValue, ...]
    show: tuple[str, ...]  # values printed by `etl run` at the end


@dataclass(frozen=True)
class Aggregate:
    table: SystemTable
    sql: str


@dataclass(frozen=True)
class WarehouseConfig:
    path: Path
    facts: tuple[Fact, ...]
    mirrors: tuple[Mirror, ...]
    raw: Raw | None
    snapshot: Snapshot | None
    aggregates: tuple[Aggregate, ...]


def load_config(path: Path) -> WarehouseConfig:
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as e:
        raise WarehouseConfigError(f"warehouse config {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise WarehouseConfigError(f"warehouse config {path} is not TOML: {e}") from e
    entries = _Entries(path)
    facts = tuple(entries.fact(i, e) for i, e in enumerate(doc.get("fact", [])))
    mirrors = tuple(entries.mirror(i, e) for i, e in enumerate(doc.get("mirror", [])))
    raw = entries.raw(doc["raw"]) if "raw" in doc else None
    snapshot = entries.snapshot(doc["snapshot"]) if "snapshot" in doc else None
    aggregates = tuple(entries.aggregate(i, e) for i, e in enumerate(doc.get("aggregate", [])))
    unknown = set(doc) - {"fact", "mirror", "raw", "snapshot", "aggregate"}
    if unknown:
        raise WarehouseConfigError(f"warehouse config {path}: unknown sections {sorted(unknown)}")
    config = WarehouseConfig(path, facts, mirrors, raw, snapshot, aggregates)
    names = [t.name for t in tables(config)] + [a.table.name for a in aggregates]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise WarehouseConfigError(f"warehouse config {path}: tables named twice: {twice}")
    return config


def tables(config: WarehouseConfig) -> list[FactTable | MirrorTable | SystemTable]:
    """Every table the streaming job writes (aggregates are the maintenance job's)."""
    out: list[FactTable | MirrorTable | SystemTable] = [f.table for f in config.facts]
    out += [m.table for m in config.mirrors]
    if config.raw is not None:
        out.append(config.raw.table)
    if config.snapshot is not None:
        out.append(config.snapshot.table)
    return out


class _Entries:
    """Reads one entry at a time, naming it in every error."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _get(self, where: str, entry: dict[str, Any], name: str, kind: type) -> Any:
        if name not in entry:
            raise WarehouseConfigError(f"{self.path}: {where} needs {name!r}")
        value = entry[name]
        if not isinstance(value, kind):
            raise WarehouseConfigError(
                f"{self.path}: {where}: {name} must be a {kind.__name__}, not {value!r}"
            )
        return value

    def _rule(self, where: str, entry: dict[str, Any]) -> str:
        rule = str(entry.get("rule", "any"))
        if rule not in RULES:
            raise WarehouseConfigError(
                f"{self.path}: {where}: unknown rule {rule!r}; rules are {sorted(RULES)}"
            )
        return rule

    def fact(self, i: int, e: dict[str, Any]) -> Fact:
        where = f"fact {i} ({e.get('table', '?')})"
        table = FactTable(self._get(where, e, "table", str), self._get(where, e, "columns", str))
        stream, schema = self._get(where, e, "stream", str), self._get(where, e, "schema", str)
        broadcast = e.get("broadcast", False)
        if not isinstance(broadcast, bool):
            raise WarehouseConfigError(
                f"{self.path}: {where}: broadcast must be true or false, not {broadcast!r}"
            )
        rule, rename = self._rule(where, e), self._rename(where, e)
        return Fact(stream, schema, rule, table, rename, broadcast)

    def mirror(self, i: int, e: dict[str, Any]) -> Mirror:
        where = f"mirror {i} ({e.get('table', '?')})"
        key = self._get(where, e, "key", list)
        if not key or not all(isinstance(k, str) for k in key):
            raise WarehouseConfigError(f"{self.path}: {where}: key must name its columns")
        table = MirrorTable(
            self._get(where, e, "table", str),
            self._get(where, e, "columns", str),
            key=tuple(key),
            dimension=bool(e.get("dimension", False)),
        )
        engine_table = str(e.get("engine_table", table.name))
        schema, rule = self._get(where, e, "schema", str), self._rule(where, e)
        return Mirror(engine_table, schema, rule, table, self._rename(where, e))

    def _rename(self, where: str, entry: dict[str, Any]) -> Renames:
        """`rename = {field = "column"}`: a field whose name the table's own columns take."""
        rename = entry.get("rename", {})
        if not isinstance(rename, dict) or not all(isinstance(v, str) for v in rename.values()):
            raise WarehouseConfigError(
                f"{self.path}: {where}: rename must map field names to column names"
            )
        return tuple(rename.items())

    def raw(self, e: dict[str, Any]) -> Raw:
        table = FactTable(self._get("raw", e, "table", str), self._get("raw", e, "columns", str))
        return Raw(self._rule("raw", e), table)

    def snapshot(self, e: dict[str, Any]) -> Snapshot:
        values = []
        for i, v in enumerate(self._get("snapshot", e, "value", list)):
            where = f"snapshot value {i} ({v.get('name', '?')})"
            shape = self._get(where, v, "shape", str)
            if shape not in SHAPES:
                raise WarehouseConfigError(f"{self.path}: {where}: shape must be one of {SHAPES}")
            column = self._get(where, v, "column", str) if "column" in v else None
            values.append(SnapshotValue(self._get(where, v, "name", str), shape,
                                        self._get(where, v, "sql", str), column))  # fmt: skip
        names = {v.name for v in values}
        show = tuple(self._get("snapshot", e, "show", list)) if "show" in e else ()
        if not set(show) <= names:
            raise WarehouseConfigError(f"{self.path}: snapshot shows unknown values {show}")
        typed = "".join(f", {v.name} {v.column}" for v in values if v.column)
        columns = f"etl_batch BIGINT, taken_at TIMESTAMP{typed}, document STRING"
        return Snapshot(SystemTable(self._get("snapshot", e, "table", str), columns),
                        tuple(values), show)  # fmt: skip

    def aggregate(self, i: int, e: dict[str, Any]) -> Aggregate:
        where = f"aggregate {i} ({e.get('table', '?')})"
        partition_by = tuple(e.get("partition_by", ()))
        table = SystemTable(
            self._get(where, e, "table", str), self._get(where, e, "columns", str), partition_by
        )
        return Aggregate(table, self._get(where, e, "sql", str))
