"""The YCSB app's operations on the real partition engine: load, read, update, and an
update of a missing row or field aborting with its reason and writing nothing."""

from __future__ import annotations

import json

from tests.support.fakes import MemoryBase
from txstream.engine.partition_engine import PartitionEngine
from txstream.oltp.messages import EngineReply, EngineRequest, Fragment
from ycsb.dataflow import FIELD_LENGTH, FIELDS, build_app, row_of


def loaded(*keys: int) -> PartitionEngine:
    base = MemoryBase()
    engine = PartitionEngine(build_app().dataflow(), base, partition=0, params={})
    assert call(engine, "0.0", Fragment.call(keys[0], "load", keys=list(keys))).results == "[2]"
    base.apply(engine.take_group())
    return engine


def call(engine: PartitionEngine, txn_id: str, *frags: Fragment) -> EngineReply:
    req = EngineRequest(txn_id, 1, "run", f"req-{txn_id}", "client", list(frags))
    assert engine.participant.request(req)
    return engine.group.replies[-1]


def test_loaded_rows_have_ycsb_s_shape_and_are_read_whole() -> None:
    engine = loaded(7, 8)
    (row,) = json.loads(call(engine, "1.1", Fragment.call(7, "read", id=7)).results)
    assert row == row_of(7) and sorted(row) == sorted(FIELDS)
    assert all(len(v) == FIELD_LENGTH for v in row.values())
    assert json.loads(call(engine, "1.2", Fragment.call(9, "read", id=9)).results) == [None]


def test_an_update_replaces_one_field_and_keeps_the_others() -> None:
    engine = loaded(7, 8)
    assert call(engine, "1.1", Fragment.call(7, "update", id=7, field="field3", value="v")).ok
    assert engine.group.ws.tables["usertable"] == {(7,): {**row_of(7), "field3": "v"}}


def test_an_update_of_a_missing_row_or_field_aborts_and_writes_nothing() -> None:
    engine = loaded(7, 8)
    r = call(engine, "1.1", Fragment.call(9, "update", id=9, field="field0", value="v"))
    assert (r.ok, r.reason) == (False, "no_row")
    r = call(engine, "1.2", Fragment.call(7, "update", id=7, field="field10", value="v"))
    assert (r.ok, r.reason) == (False, "no_field") and "field10" in r.detail
    assert "usertable" not in engine.group.ws.tables
