"""Schema changes of an app's streams, checked before the ETL writes anything.

A compatible change (a new field with a default, e.g. an optional one) flows in: records
written before it are read with the schema they carry in their header (the versions the app's
workers published, `txstream.kafka.published_schemas`), resolved to the current one by Avro's rules,
and the fact table gains the new column (older rows hold null). An incompatible change is
refused as the run starts, naming the stream, the versions and why, with nothing written:
a version of the stream's schema that the current one cannot read, or a table column whose
type changed or that the config no longer has.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType

from txstream.kafka.published_schemas import Published
from txstream.schemas.codec import BatchCodec
from txstream.schemas.compatibility import check_compatibility
from txstream.schemas.registry import SchemaRegistry
from txstream_etl.config import WarehouseConfig
from txstream_etl.tables import Table, table_path


class SchemaEvolutionError(ValueError):
    """A change the warehouse cannot follow; the run stops before writing anything."""


Writers = dict[str, tuple[tuple[str, str], ...]]  # stream -> (fingerprint, .avsc JSON) pairs


def stream_writers(
    config: WarehouseConfig, schema_dir: Path, published: Iterable[Published]
) -> Writers:
    """For each fact's stream, the published versions other than the current schema, each
    checked readable as the current one."""
    registry = SchemaRegistry(schema_dir)
    versions = list(published)
    out: Writers = {}
    problems: list[str] = []
    for fact in config.facts:
        reader = registry.get(fact.schema)
        own = BatchCodec(reader).fingerprint
        older = [p for p in versions if p.stream == fact.stream and p.fingerprint != own]
        for version in older:
            verdict = check_compatibility(reader, version.schema)
            if not verdict.compatible:
                problems.append(
                    f"stream {fact.stream!r}: records written with schema version "
                    f"{version.fingerprint} cannot be read as {fact.schema} {own} "
                    f"({'; '.join(verdict.messages)})"
                )
        out[fact.stream] = tuple((p.fingerprint, json.dumps(p.schema)) for p in older)
    if problems:
        advice = "make the change compatible (a new field needs a default) or revert it"
        raise SchemaEvolutionError(_refusal(problems, advice))
    return out


def new_columns(table: str, existing: StructType, wanted: StructType) -> list[StructField]:
    """The config's columns the Delta table lacks; a changed or missing one is refused."""
    have = {f.name.lower(): f for f in existing.fields}
    want = {f.name.lower(): f for f in wanted.fields}
    problems = [
        f"table {table!r}: column {f.name} is {have[n].dataType.simpleString()} in Delta, "
        f"{f.dataType.simpleString()} in the config"
        for n, f in want.items()
        if n in have and have[n].dataType.simpleString() != f.dataType.simpleString()
    ]
    problems += [
        f"table {table!r}: column {f.name} is in Delta but no longer in the config"
        for n, f in have.items()
        if n not in want
    ]
    if problems:
        advice = "rebuild the table into a new warehouse (etl backfill --into) or revert"
        raise SchemaEvolutionError(_refusal(problems, advice))
    return [f for n, f in want.items() if n not in have]


def existing_schemas(
    spark: SparkSession, root: str, tables: Iterable[Table]
) -> dict[str, StructType]:
    """The Delta schema of each of the tables that exist already."""
    out = {}
    for table in tables:
        path = table_path(root, table.name)
        if DeltaTable.isDeltaTable(spark, path):
            out[table.name] = DeltaTable.forPath(spark, path).toDF().schema
    return out


def additions(
    existing: Mapping[str, StructType], tables: Iterable[Table]
) -> dict[str, list[StructField]]:
    """Per existing table, the columns to add; raises for a change that cannot be made."""
    out = {}
    for table in tables:
        if table.name in existing:
            added = new_columns(table.name, existing[table.name], table.schema)
            if added:
                out[table.name] = added
    return out


def add_columns(spark: SparkSession, root: str, added: Mapping[str, list[StructField]]) -> None:
    for name, fields in added.items():
        columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in fields)
        spark.sql(f"ALTER TABLE delta.`{table_path(root, name)}` ADD COLUMNS ({columns})")


def _refusal(problems: list[str], advice: str) -> str:
    listed = "\n".join(f"  - {p}" for p in problems)
    return f"refusing the schema change, nothing was written:\n{listed}\n{advice}"
