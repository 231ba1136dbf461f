"""The ETL benchmark's end: it waits for the mirrors' query to finish a micro-batch that read
the changelog to its committed end, by offsets. A wait on record timestamps never ended when
the last commit's vote was produced a millisecond after its last changelog record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from bench.etl_bench import changelog_ages, passes, read_to

TOPIC = "app.changelog"


def _micro_batch(checkpoint: Path, n: int, ends: dict[str, int], done: bool) -> None:
    """Spark's offset log entry for micro-batch n (a version, its metadata, one line per
    source), and its commit log entry once it ran."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_764_000_000_000 + n}
    text = f"v1\n{json.dumps(meta)}\n{json.dumps({TOPIC: ends})}"
    (checkpoint / "offsets" / str(n)).write_text(text)
    (checkpoint / "offsets" / f".{n}.crc").write_text("")  # Hadoop's checksum files
    if done:
        (checkpoint / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_wait_ends_once_a_finished_micro_batch_read_to_the_committed_end(
    tmp_path: Path,
) -> None:
    ends = {TOPIC: {"0": 120, "1": 80}}
    _micro_batch(tmp_path, 0, {"0": 50, "1": 80}, done=True)
    assert not read_to(tmp_path, ends)
    _micro_batch(tmp_path, 1, {"0": 120, "1": 80}, done=False)  # planned, still running
    assert not read_to(tmp_path, ends)
    (tmp_path / "commits" / "1").write_text("v1\n{}")
    assert read_to(tmp_path, ends)


def test_a_partition_the_query_has_not_read_yet_is_not_reached() -> None:
    assert not passes({TOPIC: {"0": 120}}, {TOPIC: {"0": 120, "1": 3}})
    assert passes({TOPIC: {"0": 121, "1": 3}}, {TOPIC: {"0": 120, "1": 3}})
    assert passes({TOPIC: {"0": 0}}, {TOPIC: {"0": 0, "1": 0}})  # empty partitions


def test_the_mirrors_ages_take_micro_batches_by_offset_not_by_timestamp(tmp_path: Path) -> None:
    # The measured votes began at changelog offset 100. Micro-batch 2 read the first
    # measured commit, whose vote (40.336) was produced 1 ms after its changelog (40.335).
    def ms(n: int) -> datetime:
        return datetime(2025, 1, 1, 12, 0, 40, tzinfo=UTC) + timedelta(milliseconds=n)

    checkpoint = tmp_path / "_checkpoints" / "changelog"
    for n, end in [(1, 100), (2, 130), (3, 160)]:
        _micro_batch(checkpoint, n, {"0": end}, done=True)
    marks = pa.table({
        "query": ["changelog"] * 3 + ["streams"],
        "etl_batch": [1, 2, 3, 2],
        "committed_at": [ms(-500), ms(900), ms(1900), ms(800)],
        "first_kafka_ts": [ms(-2000), ms(300), ms(1000), ms(336)],
        "last_kafka_ts": [ms(-1000), ms(335), ms(1500), ms(336)],
    })  # fmt: skip
    write_deltalake(str(tmp_path / "etl_commits"), marks)
    ages, missed = changelog_ages(tmp_path, checkpoint, {TOPIC: {"0": 100}})
    assert ages == [0.6, 0.9] and missed == 0


def test_micro_batches_spark_no_longer_keeps_are_counted_when_they_may_be_measured(
    tmp_path: Path,
) -> None:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    checkpoint = tmp_path / "cp"
    _micro_batch(checkpoint, 5, {"0": 300}, done=True)  # 0-4: purged by Spark
    marks = pa.table({
        "query": ["changelog"] * 3, "etl_batch": [3, 4, 5], "committed_at": [at] * 3,
        "first_kafka_ts": [at] * 3, "last_kafka_ts": [at] * 3,
    })  # fmt: skip
    write_deltalake(str(tmp_path / "etl_commits"), marks)
    assert changelog_ages(tmp_path, checkpoint, {TOPIC: {"0": 200}}) == ([0.0], 2)
    assert changelog_ages(tmp_path, checkpoint, {TOPIC: {"0": 300}}) == ([], 0)
