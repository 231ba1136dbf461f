"""The warehouse's side of a schema change: which published versions a run may read, and
which table columns it adds; anything else is refused, naming what changed."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

from txstream.config import Settings
from txstream.kafka.published_schemas import Published
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream_etl.config import load_config
from txstream_etl.evolution import SchemaEvolutionError, new_columns, stream_writers

LEADERBOARD = Settings().schema_dir.parent / "apps" / "leaderboard" / "warehouse.toml"


def columns(**types: DataType) -> StructType:
    return StructType([StructField(name, t) for name, t in types.items()])


def vote_schema(**fields: Any) -> dict[str, Any]:
    current: dict[str, Any] = SchemaRegistry(Settings().schema_dir).get("leaderboard.AcceptedVote")  # type: ignore[assignment]
    doc = {k: v for k, v in current.items() if not k.startswith("__")}
    doc["fields"] = list(({f["name"]: f for f in current["fields"]} | fields).values())
    return doc


def version(schema: dict[str, Any]) -> Published:
    return Published("accepted_votes", BatchCodec(schema).fingerprint, schema)


def test_a_version_the_current_schema_reads_is_handed_to_the_decoder() -> None:
    config = load_config(LEADERBOARD)
    dropped_since = vote_schema(channel={"name": "channel", "type": "string"})
    current = vote_schema()
    writers = stream_writers(config, Settings().schema_dir, [version(dropped_since),
                                                              version(current)])  # fmt: skip
    ((fingerprint, _),) = writers["accepted_votes"]  # the current one needs no look-up
    assert fingerprint == BatchCodec(dropped_since).fingerprint


def test_a_version_the_current_schema_cannot_read_is_refused_by_name() -> None:
    config = load_config(LEADERBOARD)
    retyped = version(vote_schema(state={"name": "state", "type": "long"}))
    with pytest.raises(SchemaEvolutionError) as refused:
        stream_writers(config, Settings().schema_dir, [retyped])
    assert "stream 'accepted_votes'" in str(refused.value)
    assert retyped.fingerprint in str(refused.value) and "state" in str(refused.value)
    assert "nothing was written" in str(refused.value)


def test_new_columns_are_added_and_changed_or_dropped_ones_refused() -> None:
    table = columns(id=LongType(), name=StringType())
    wider = columns(id=LongType(), name=StringType(), region=StringType())
    assert [f.name for f in new_columns("t", table, wider)] == ["region"]
    assert new_columns("t", table, table) == []
    with pytest.raises(SchemaEvolutionError, match="column name is string in Delta, bigint"):
        new_columns("t", table, columns(id=LongType(), name=LongType()))
    with pytest.raises(SchemaEvolutionError, match="column name is in Delta but no longer"):
        new_columns("t", table, columns(id=LongType()))
