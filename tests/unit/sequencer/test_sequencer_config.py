"""The sequencer's route settings: what a route file may not combine."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from txstream.sequencer_config import Route

BASE: dict[str, Any] = {"topic": "raw", "app": "a", "stream": "s", "schema": "leaderboard.Vote"}


def test_a_route_needs_exactly_one_batch_id_source() -> None:
    with pytest.raises(ValidationError, match="set exactly one of batch_id_field"):
        Route.model_validate({**BASE, "batch_id_field": "b", "batch_id_header": "h"})


def test_a_broadcast_route_takes_no_key_field() -> None:
    with pytest.raises(ValidationError, match="a broadcast route sends every batch to every"):
        Route.model_validate(
            {**BASE, "batch_id_field": "b", "broadcast": True, "key_field": "phone_number"}
        )
    assert Route.model_validate({**BASE, "batch_id_field": "b", "broadcast": True}).broadcast


@pytest.mark.parametrize(
    "other", [{"broadcast": True}, {"key_field": "phone_number"}, {"progress": True}]
)
def test_a_spanning_route_is_placed_by_its_keys_alone(other: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="a spanning route places each batch by the keys"):
        Route.model_validate({**BASE, "batch_id_field": "b", "spanning": True, **other})
    assert Route.model_validate({**BASE, "policy_events": 5, "spanning": True}).spanning


@pytest.mark.parametrize(
    "route",
    [{"policy_events": 10}, {"batch_id_field": "b", "broadcast": True}],
)
def test_progress_marks_need_client_ids_on_a_keyed_route(route: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="progress marks say which of the client's"):
        Route.model_validate({**BASE, **route, "progress": True})
    assert Route.model_validate({**BASE, "batch_id_field": "b", "progress": True}).progress
