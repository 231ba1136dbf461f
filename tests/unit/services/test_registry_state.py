"""The schema registry's logic without Kafka: ids, versions, compatibility levels, replay;
and its HTTP API over an in-memory log, in Confluent's shapes (the real thing, with
confluent-kafka's serializer and the real broker: tests/integration/test_schema_registry.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from txstream_registry.api import Registry, make_api
from txstream_registry.state import RegistryError, RegistryState, parse


def record(*fields: dict[str, Any], name: str = "Vote") -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "t", "fields": list(fields)})


V1 = record({"name": "id", "type": "long"})
V2_DEFAULT = record({"name": "id", "type": "long"}, {"name": "n", "type": "int", "default": 0})
V2_REQUIRED = record({"name": "id", "type": "long"}, {"name": "n", "type": "int"})


def new_log() -> list[dict[str, Any]]:
    return []


def register(state: RegistryState, subject: str, text: str, log: list[Any]) -> int:
    schema_id, rec = state.plan_register(subject, parse(text))
    if rec is not None:
        log.append(rec)
        state.apply(rec)
    return schema_id


def test_one_schema_one_id_and_a_version_per_change() -> None:
    state, log = RegistryState(), new_log()
    assert register(state, "a-value", V1, log) == 1
    assert register(state, "a-value", json.dumps(json.loads(V1), indent=2), log) == 1  # same
    assert register(state, "b-value", V1, log) == 1  # another subject: same id, its version 1
    assert state.version("b-value", "latest") == (1, 1)
    assert register(state, "a-value", V2_DEFAULT, log) == 2
    assert state.versions("a-value") == [1, 2]
    assert state.lookup("a-value", parse(V1)) == (1, 1)
    assert len(log) == 3


def test_backward_refuses_a_new_required_field_and_none_allows_it() -> None:
    state, log = RegistryState(), new_log()
    register(state, "a-value", V1, log)
    with pytest.raises(RegistryError) as refused:
        register(state, "a-value", V2_REQUIRED, log)
    assert (refused.value.status, refused.value.code) == (409, 409)
    assert "field 'n'" in refused.value.message and "(BACKWARD)" in refused.value.message
    state.apply(state.plan_level("a-value", "NONE"))
    assert register(state, "a-value", V2_REQUIRED, log) == 2


def test_forward_checks_the_other_way() -> None:
    """FORWARD: data of the new schema must be readable with the old one."""
    state, log = RegistryState(), new_log()
    state.apply(state.plan_level("", "FORWARD"))
    register(state, "a-value", V1, log)
    assert register(state, "a-value", V2_REQUIRED, log) == 2  # V1 readers skip the new field
    with pytest.raises(RegistryError) as refused:
        register(state, "b-value", V2_REQUIRED, log)
        register(state, "b-value", V1, log)  # V2 readers would miss 'n', which has no default
    assert "field 'n'" in refused.value.message and "(FORWARD)" in refused.value.message


def test_bad_input_is_refused_with_confluents_codes() -> None:
    state = RegistryState()
    with pytest.raises(RegistryError) as bad:
        parse("{not json")
    assert (bad.value.status, bad.value.code) == (422, 42201)
    with pytest.raises(RegistryError) as other:
        parse(V1, schema_type="PROTOBUF")
    assert other.value.code == 42201
    with pytest.raises(RegistryError) as level:
        state.plan_level("", "SIDEWAYS")
    assert level.value.code == 42203
    with pytest.raises(RegistryError) as missing:
        state.versions("nope")
    assert missing.value.code == 40401
    with pytest.raises(RegistryError) as no_id:
        state.schema(7)
    assert no_id.value.code == 40403


def test_a_replay_of_the_log_gives_the_same_state() -> None:
    state, log = RegistryState(), new_log()
    register(state, "a-value", V1, log)
    register(state, "a-value", V2_DEFAULT, log)
    register(state, "b-value", V2_DEFAULT, log)
    log.append(state.plan_level("b-value", "FULL"))
    state.apply(log[-1])
    again = RegistryState()
    for rec in log:
        again.apply(json.loads(json.dumps(rec)))
    assert (again.subjects, again.ids, again.levels) == (state.subjects, state.ids, state.levels)


class MemoryLog:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def replay(self) -> Iterator[dict[str, Any]]:
        return iter(list(self.records))

    def append(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)


def test_the_api_answers_as_confluents_does() -> None:
    log = MemoryLog()
    api = TestClient(make_api(Registry(log, lambda: None)))  # type: ignore[arg-type]
    answer = api.post("/subjects/votes-value/versions", json={"schema": V1})
    assert answer.status_code == 200 and answer.json()["id"] == 1
    assert answer.headers["content-type"].startswith("application/vnd.schemaregistry.v1+json")
    assert api.get("/schemas/ids/1").json() == {"schema": parse(V1).text}
    assert api.get("/subjects").json() == ["votes-value"]
    assert api.get("/subjects/votes-value/versions").json() == [1]
    latest = api.get("/subjects/votes-value/versions/latest").json()
    assert (latest["version"], latest["id"]) == (1, 1)
    refused = api.post("/subjects/votes-value/versions", json={"schema": V2_REQUIRED})
    assert refused.status_code == 409 and refused.json()["error_code"] == 409
    check = api.post(
        "/compatibility/subjects/votes-value/versions/latest", json={"schema": V2_DEFAULT}
    )
    assert check.json()["is_compatible"] is True
    assert api.get("/config").json() == {"compatibilityLevel": "BACKWARD"}
    assert api.put("/config/votes-value", json={"compatibility": "none"}).json() == {
        "compatibility": "NONE"
    }
    assert api.get("/schemas/ids/9").json()["error_code"] == 40403
    assert api.post("/subjects/votes-value/versions", json={"nope": 1}).status_code == 422
    # written to the log before it is served: a registry replaying it serves the same
    again = TestClient(make_api(Registry(log, lambda: None)))  # type: ignore[arg-type]
    assert again.get("/config/votes-value").json() == {"compatibilityLevel": "NONE"}
    assert again.get("/schemas/ids/1").json() == {"schema": parse(V1).text}
