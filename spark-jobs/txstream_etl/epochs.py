"""Reading a query's tables as of one of its micro-batches (an epoch), all at once.

Each table is its own Delta log, so a reader of two tables may see one before a micro-batch
and the other after it. `etl_commits` records, per micro-batch, the Delta version each of the
query's own tables had once every one of them held it; reading each table at that version
(Delta time travel) shows them as of the same micro-batch. A changelog micro-batch ends at
a consistent cut (`cut.py`): whole engine group commits of every partition, and every 2PC
transaction and spanning batch on all its partitions or on none, so the mirrors show a state
the app was in.

Python, with delta-rs (no Spark): `tables_at(root, "changelog")`. Spark SQL: `sql_at(...)`
gives `VERSION AS OF` for each table. Versions are readable while their files are kept
(`delta.deletedFileRetentionDuration`, 7 days, then `etl maintain` vacuums them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from txstream_etl.tables import ETL_COMMITS_TABLE, table_path


class NoSuchEpoch(LookupError):
    """No micro-batch of that query (with versions) is recorded."""


@dataclass(frozen=True)
class Epoch:
    query: str
    etl_batch: int
    versions: dict[str, int]  # table -> Delta version


def epoch(root: str | Path, query: str, etl_batch: int | None = None) -> Epoch:
    """The recorded micro-batch `etl_batch` of the query, or its newest."""
    marks = DeltaTable(table_path(str(root), ETL_COMMITS_TABLE.name))
    found = pa.table(
        QueryBuilder()
        .register("c", marks)
        .execute("SELECT query, etl_batch, versions FROM c")
        .read_all()
    ).to_pylist()
    rows = [
        r
        for r in found
        if r["query"] == query
        and r["versions"]
        and (etl_batch is None or r["etl_batch"] == etl_batch)
    ]
    if not rows:
        which = "any micro-batch" if etl_batch is None else f"micro-batch {etl_batch}"
        raise NoSuchEpoch(f"{root}: etl_commits records no {which} of query {query!r}")
    newest = max(rows, key=lambda r: r["etl_batch"])
    return Epoch(query, newest["etl_batch"], dict(newest["versions"]))


def tables_at(
    root: str | Path, query: str, etl_batch: int | None = None
) -> tuple[Epoch, dict[str, DeltaTable]]:
    """Every own table of the query, each at its version as of the micro-batch."""
    at = epoch(root, query, etl_batch)
    tables = {
        name: DeltaTable(table_path(str(root), name), version=version)
        for name, version in sorted(at.versions.items())
    }
    return at, tables


def sql_at(root: str | Path, query: str, etl_batch: int | None = None) -> str:
    """Spark SQL views of the query's tables as of the micro-batch, to run before a query."""
    at = epoch(root, query, etl_batch)
    return "\n".join(
        f"CREATE OR REPLACE TEMPORARY VIEW {name} AS "
        f"SELECT * FROM delta.`{table_path(str(root), name)}` VERSION AS OF {version};"
        for name, version in sorted(at.versions.items())
    )
