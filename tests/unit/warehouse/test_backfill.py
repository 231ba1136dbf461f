"""What `txstream etl backfill` refuses before it starts Spark work: replacing a warehouse it
cannot replace safely, or building into a place that is not empty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from txstream.config import Settings
from txstream_etl.backfill import BackfillError, backfill
from txstream_etl.config import WarehouseConfig

NO_SPARK: Any = None  # each case is refused before the job would use it
CONFIG: Any = WarehouseConfig.__new__(WarehouseConfig)


def test_a_remote_warehouse_is_not_replaced_in_place(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, warehouse_uri="s3a://bucket/wh")
    with pytest.raises(BackfillError, match=r"s3a://bucket/wh is not a local.*--into"):
        backfill(NO_SPARK, settings, "shop", CONFIG)


def test_checkpoints_kept_apart_would_be_left_behind(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, checkpoint_uri=str(tmp_path / "cp"))
    with pytest.raises(BackfillError, match=r"checkpoints live apart.*--into"):
        backfill(NO_SPARK, settings, "shop", CONFIG)


def test_a_copy_goes_into_a_fresh_place_only(tmp_path: Path) -> None:
    (tmp_path / "elsewhere" / "shop" / "placed").mkdir(parents=True)
    settings = Settings(home=tmp_path)
    with pytest.raises(BackfillError, match=r"elsewhere/shop is not empty"):
        backfill(NO_SPARK, settings, "shop", CONFIG, into=str(tmp_path / "elsewhere"))
