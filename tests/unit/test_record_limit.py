"""The record limit's cheap bound never under-counts a changelog record, so no row it clears
without encoding can be too large for Kafka."""

from __future__ import annotations

import pytest

from leaderboard.dataflow import Params, build_app
from txstream.commit.record_limit import _row_bound
from txstream.config import Settings
from txstream.model.declarations import Key, Record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec

WIDE = "é€😀" * 50  # 2, 3 and 4 bytes a character in UTF-8


@pytest.mark.parametrize(
    ("table", "key", "row"),
    [
        ("stats", ("accepted",), {"value": -(2**63)}),
        ("contestants", (7,), {"contestant_number": 7, "contestant_name": "", "num_votes": 0}),
        ("contestants", (7,), {"contestant_number": 7, "contestant_name": WIDE, "num_votes": 1}),
        ("votes_by_contestant", (3, 2**40), {}),
    ],
)
def test_the_bound_is_at_least_the_encoded_record(table: str, key: Key, row: Record) -> None:
    codec = StateCodec(build_app(Params()).dataflow(), SchemaRegistry(Settings().schema_dir))
    encoded = len(codec.key(table, key)) + len(codec.encode_row(table, row))
    assert _row_bound(table, key, row) >= encoded
