"""Rebuild an app's warehouse from scratch: every committed record, from the topics' start.

The copy is built beside the warehouse by the same queries the streaming ETL runs, with
their own checkpoints, from the first offset of every topic, so it holds what an
incremental load of the same committed records holds (one micro-batch or many: every write
is keyed and exactly once). Only once the copy is complete does it replace the app's
directory, the old one kept aside: a backfill that fails or is killed leaves the warehouse
as it was. A copy into `into` leaves the warehouse alone, for comparing or moving by hand.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from txstream.config import Settings
from txstream_etl.config import WarehouseConfig
from txstream_etl.job import RunOptions, app_root, run, warehouse_root


class BackfillError(RuntimeError):
    """The backfill cannot replace the warehouse in place (say where to build it instead)."""


@dataclass(frozen=True)
class Backfilled:
    root: str  # where the rebuilt tables are now
    rows: dict[str, int]  # rows written per table


def backfill(
    spark: SparkSession,
    settings: Settings,
    app: str,
    config: WarehouseConfig,
    into: str | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> Backfilled:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = warehouse_root(settings).rstrip("/")
    if into is None:
        if "://" in base and not base.startswith("file://"):
            raise BackfillError(
                f"the warehouse {base} is not a local directory, so it cannot be replaced "
                "in place: build the copy with --into URI and move it yourself"
            )
        if settings.checkpoint_uri:
            raise BackfillError(
                f"checkpoints live apart from the tables ({settings.checkpoint_uri}), so "
                "replacing the tables would leave the streaming ETL's checkpoints behind: "
                "build the copy with --into URI"
            )
    staging = into or f"{base}/.backfill-{stamp}"
    copy = settings.model_copy(update={"warehouse_uri": staging, "checkpoint_uri": ""})
    target = app_root(copy, app)
    if _local(target).exists() and any(_local(target).iterdir()):
        raise BackfillError(f"{target} is not empty: a backfill builds into a fresh place")
    say(f"rebuilding {app} from the start of its topics into {target}")
    writers = run(spark, copy, app, config, None, RunOptions(once=True))
    rows = {t: w.stats.rows[t] for w in writers for t in w.tables}
    if into is not None:
        return Backfilled(target, rows)
    live, kept = _local(app_root(settings, app)), _local(f"{base}/.replaced-{stamp}/{app}")
    if live.exists():
        kept.parent.mkdir(parents=True)
        os.replace(live, kept)
        say(f"the warehouse it replaces is kept in {kept}")
    live.parent.mkdir(parents=True, exist_ok=True)
    os.replace(_local(target), live)
    shutil.rmtree(_local(staging), ignore_errors=True)  # it held the copy alone
    return Backfilled(str(live), rows)


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))
