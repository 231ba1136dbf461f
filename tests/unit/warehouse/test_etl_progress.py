"""Spark's per-stage durations of a micro-batch, as the ETL's metrics and log report them."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY

from txstream_etl.progress import STAGES, MicroBatchProgress, expect, query_label


def sample(kind: str, query: str, stage: str) -> float:
    """The histogram's `_count` or `_sum` for the query and stage (0 before any)."""
    labels = {"query": query, "stage": stage}
    return REGISTRY.get_sample_value(f"txstream_etl_micro_batch_seconds_{kind}", labels) or 0.0


def test_spark_names_a_query_app_colon_query() -> None:
    assert query_label("bank-7:changelog") == "changelog"
    assert query_label("streams") == "streams"
    assert query_label(None) == "unnamed"


def test_each_stage_of_a_progress_is_observed_in_seconds_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    query = "progress-test"
    stages = ("addBatch", "triggerExecution")
    before = {s: (sample("count", query, s), sample("sum", query, s)) for s in stages}
    progress = SimpleNamespace(
        name=f"app-1:{query}", batchId=41, numInputRows=4490,
        durationMs={"addBatch": 3161, "triggerExecution": 3869},
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="txstream.etl"):
        MicroBatchProgress().onQueryProgress(SimpleNamespace(progress=progress))
    for stage, ms in (("addBatch", 3161), ("triggerExecution", 3869)):
        assert sample("count", query, stage) == before[stage][0] + 1
        assert sample("sum", query, stage) == pytest.approx(before[stage][1] + ms / 1000)
    assert (
        f"{query} micro-batch 41: 4490 rows read by Spark; Spark's stages: addBatch 3161 ms, "
        "triggerExecution 3869 ms"
    ) in caplog.text


def test_a_querys_series_exist_at_zero_before_its_first_micro_batch() -> None:
    """So its first micro-batch is an increase Prometheus can rate."""
    query = "expected-query"
    assert (
        REGISTRY.get_sample_value(
            "txstream_etl_micro_batch_seconds_count", {"query": query, "stage": "addBatch"}
        )
        is None
    )
    expect(query)
    for stage in STAGES:
        assert sample("count", query, stage) == 0.0
        assert (
            REGISTRY.get_sample_value(
                "txstream_etl_micro_batch_seconds_count", {"query": query, "stage": stage}
            )
            == 0.0
        )
