"""Lane state on its compacted topic: one record per lane, written in each transaction."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from fastavro.types import Schema

from txstream.schemas.records import decode_record, encode_record
from txstream_sequencer.lanes import LaneState

LaneId = tuple[str, int]  # (border topic, partition)


def lane_key(lane: LaneId) -> bytes:
    return f"{lane[0]}/{lane[1]}".encode()


def encode_state(schema: Schema, lane: LaneId, state: LaneState) -> bytes:
    handled = [
        {
            "topic": topic,
            "partition": part,
            "through": state.through.get((topic, part), 0),
            "above": sorted(state.above.get((topic, part), ())),
        }
        for topic, part in sorted(set(state.through) | set(state.above))
    ]
    record = {
        "topic": lane[0],
        "partition": lane[1],
        "last_batch_id": state.last,
        "recent": [{"batch_id": b, "digest": d} for b, d in state.recent.items()],
        "handled": handled,
    }
    return encode_record(schema, record)


def decode_state(schema: Schema, data: bytes) -> tuple[LaneId, LaneState]:
    record: Any = decode_record(schema, data)
    state = LaneState(
        last=record["last_batch_id"],
        recent=OrderedDict((r["batch_id"], r["digest"]) for r in record["recent"]),
        through={(h["topic"], h["partition"]): h["through"] for h in record["handled"]},
        above={
            (h["topic"], h["partition"]): set(h["above"]) for h in record["handled"] if h["above"]
        },
    )
    return (record["topic"], record["partition"]), state
