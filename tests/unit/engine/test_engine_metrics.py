"""What the engine reports for metrics: each TE's latency by procedure, and window slides
counted in the group (the task turns both into Prometheus samples)."""

from __future__ import annotations

from chain.dataflow import build_app as chain_app
from leaderboard.dataflow import Params
from leaderboard.dataflow import build_app as leaderboard_app
from tests.support.fakes import MemoryBase
from txstream.engine.partition_engine import PartitionEngine


def test_each_te_is_timed_under_its_procedure() -> None:
    app = chain_app(3)
    seen: list[tuple[str, float]] = []
    engine = PartitionEngine(
        app.dataflow(), MemoryBase(), 0, app.params, timer=lambda proc, s: seen.append((proc, s))
    )
    for b in range(1, 5):
        engine.process("s0", b, [{"key": 1, "value": b}])
    assert [p for p, _ in seen] == ["sp1", "sp2", "sp3"] * 4
    assert all(s >= 0 for _, s in seen)


def test_window_slides_are_counted_per_group() -> None:
    params = Params(contestants=3, threshold=1000, window=4, slide=2)
    engine = PartitionEngine(leaderboard_app(params).dataflow(), MemoryBase(), 0, vars(params))
    engine.process(
        "contestant_rows",
        1,
        [{"contestant_number": n, "contestant_name": f"c{n}", "num_votes": 0} for n in (1, 2, 3)],
    )
    engine.process("area_code_rows", 1, [{"area_code": 617, "state": "MA"}])
    for b in range(1, 7):
        vote = {"vote_id": b, "phone_number": 6175550100 + b, "contestant_number": 1 + b % 3}
        engine.process("votes", b, [vote])
    slides = engine.take_group().stats.slides
    assert sum(slides.values()) == 3, slides  # 6 valid votes, a slide every 2


def test_te_latencies_are_exposed_as_a_cumulative_prometheus_histogram() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from txstream.observability.metrics import te_timer

    observe = te_timer("hist-test")
    for seconds in (0.00005, 0.0003, 0.0003, 0.02, 3.0):
        observe("p", seconds)
    families = text_string_to_metric_families(generate_latest().decode())
    samples = {
        (s.name, s.labels.get("le")): s.value
        for f in families
        if f.name == "txstream_te_seconds"
        for s in f.samples
        if s.labels.get("app") == "hist-test"
    }
    assert samples[("txstream_te_seconds_bucket", "0.0001")] == 1
    assert samples[("txstream_te_seconds_bucket", "0.0005")] == 3
    assert samples[("txstream_te_seconds_bucket", "0.025")] == 4
    assert samples[("txstream_te_seconds_bucket", "2.5")] == 4
    assert samples[("txstream_te_seconds_bucket", "+Inf")] == 5
    assert samples[("txstream_te_seconds_count", None)] == 5
    assert abs(samples[("txstream_te_seconds_sum", None)] - 3.02065) < 1e-9
