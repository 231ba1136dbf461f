"""The machine line a benchmark's figures are recorded with, and its crowded-broker warning."""

from __future__ import annotations

from typing import Any

from bench.machine_info import CROWDED_TOPICS, crowded_warning, machine_text

HOST: dict[str, Any] = {"cores": 2, "ram_gib": 23.5, "python": "3.11.7"}


def test_the_line_names_the_brokers_topics_when_they_were_counted() -> None:
    assert machine_text(HOST) == "2 cores, 23.5 GiB RAM, Python 3.11.7"
    counted = {**HOST, "broker_topics": 4305, "broker_partitions": 6120}
    assert machine_text(counted) == (
        "2 cores, 23.5 GiB RAM, Python 3.11.7, the broker holding 4,305 topics "
        "(6,120 partitions) at the start"
    )


def test_a_crowded_broker_is_warned_of_and_a_clean_one_is_not() -> None:
    assert crowded_warning(HOST) is None
    assert crowded_warning({**HOST, "broker_topics": CROWDED_TOPICS - 1}) is None
    warning = crowded_warning({**HOST, "broker_topics": 4305})
    assert warning is not None
    assert "4,305 topics" in warning
    assert "txstream topics delete" in warning
