"""The ETL's Python side, without Spark: envelopes, changelog records and raw events to
routed rows, and cleaning rules that quarantine with a reason."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from txstream.commit.markers import commit_end
from txstream.config import Settings
from txstream.engine.group import SpanPart
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import encode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.keys import encode_key
from txstream_etl.cut import COMMIT, PREPARED, SPAN
from txstream_etl.decode import DECODED, Decoder, KafkaRecord, UnknownWriterSchema, decode_arrow
from txstream_etl.plan import ChangelogSource, Plan, RawSource, StateTable, StreamSource
from txstream_etl.rules import Rejected, accepted_vote, contestant

SCHEMAS = str(Settings().schema_dir)
PLAN = Plan(
    SCHEMAS,
    {
        "app.accepted_votes": StreamSource(
            "accepted_votes", "leaderboard.AcceptedVote", "votes", "accepted_vote"
        ),
        "app.changelog": ChangelogSource(
            {
                "contestants": StateTable(
                    "leaderboard.Contestant", "contestants", ("contestant_number",), "contestant"
                ),
                "stats": StateTable("leaderboard.Count", "stats", ("counter", "detail")),
            }
        ),
        "raw": RawSource("ingested_votes"),
    },
)
VOTE = {"vote_id": 1, "phone_number": 6175550101, "contestant_number": 3, "state": "MA"}


def record(
    topic: str, value: bytes | None, key: bytes | None = None, offset: int = 5
) -> KafkaRecord:
    return KafkaRecord(topic, 0, offset, 1_700_000_000_000, key, value)


def decode(rec: KafkaRecord) -> list[dict[str, Any]]:
    return list(Decoder(PLAN).decode(rec))


def schema(name: str) -> Any:
    return SchemaRegistry(Settings().schema_dir).get(name)


def test_a_batch_envelope_yields_its_tuples_in_order_with_its_batch_id() -> None:
    codec = BatchCodec(schema("leaderboard.AcceptedVote"))
    bad = {**VOTE, "vote_id": 2, "state": "m4"}
    out = decode(record("app.accepted_votes", codec.encode("accepted_votes", 42, [VOTE, bad])))
    assert [(r["table"], r["batch_id"], r["seq"], r["reason"]) for r in out] == [
        ("votes", 42, 0, None),
        ("votes", 42, 1, "bad_state"),
    ]
    assert json.loads(out[0]["row"]) == VOTE
    assert json.loads(out[1]["payload"]) == bad and out[1]["row"] is None


def test_bytes_that_are_no_envelope_are_quarantined_whole() -> None:
    (out,) = decode(record("app.accepted_votes", b"\x00\x01junk"))
    assert (out["table"], out["reason"]) == ("votes", "undecodable")
    assert "not a batch envelope" in out["detail"]
    assert out["payload"] == "\x00\x01junk"


def test_changelog_rows_name_their_key_and_tombstones_are_deletes() -> None:
    row = {"contestant_number": 3, "contestant_name": " Leonard Cohen ", "num_votes": 7}
    value = encode_record(schema("leaderboard.Contestant"), row)
    (put,) = decode(record("app.changelog", value, encode_key(("contestants", 3))))
    assert json.loads(put["row"]) == {**row, "contestant_name": "Leonard Cohen"}
    (gone,) = decode(record("app.changelog", None, encode_key(("contestants", 3))))
    assert gone["deleted"] and json.loads(gone["row"]) == {"contestant_number": 3}
    counter = encode_record(schema("leaderboard.Count"), {"value": 9})
    (stat,) = decode(record("app.changelog", counter, encode_key(("stats", "rejected", "late"))))
    assert json.loads(stat["row"]) == {"counter": "rejected", "detail": "late", "value": 9}
    (acc,) = decode(record("app.changelog", counter, encode_key(("stats", "accepted"))))
    assert json.loads(acc["row"]) == {"counter": "accepted", "detail": None, "value": 9}


def test_unmapped_engine_state_is_skipped_and_broken_keys_quarantined() -> None:
    assert decode(record("app.changelog", b"x", encode_key(("phone_votes", 1)))) == []
    (bad,) = decode(record("app.changelog", b"x", b"\x99"))
    assert bad["reason"] == "undecodable" and "state key" in bad["detail"]


def test_raw_events_are_normalized_or_quarantined_with_the_raw_text() -> None:
    (ok,) = decode(record("raw", b"1,617-555-0101,3,2026-11-22T07:00:00Z"))
    assert json.loads(ok["row"])["phone_number"] == 6175550101
    (bad,) = decode(record("raw", b"1,617-555-0101"))
    assert (bad["reason"], bad["payload"]) == ("unparseable", "1,617-555-0101")


def test_arrow_batches_keep_the_decoded_schema() -> None:
    codec = BatchCodec(schema("leaderboard.AcceptedVote"))
    batch = pa.RecordBatch.from_pylist(
        [
            {"topic": "app.accepted_votes", "partition": 0, "offset": 1, "kafka_ts_ms": 5,
             "key": None, "value": codec.encode("accepted_votes", 1, [VOTE])},
            {"topic": "raw", "partition": 0, "offset": 2, "kafka_ts_ms": 6, "key": None,
             "value": b"nonsense"},
        ]
    )  # fmt: skip
    (out,) = list(decode_arrow(PLAN, [batch]))
    assert out.schema == DECODED
    assert out.column("reason").to_pylist() == [None, "unparseable"]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({**VOTE, "vote_id": 0}, "bad_vote_id"),
        ({**VOTE, "phone_number": 617555010}, "bad_phone_number"),
        ({**VOTE, "contestant_number": -1}, "bad_contestant_number"),
        ({**VOTE, "state": "Mass"}, "bad_state"),
    ],
)
def test_vote_rules_name_the_bad_field(row: dict[str, Any], reason: str) -> None:
    with pytest.raises(Rejected) as e:
        accepted_vote(row)
    assert e.value.reason == reason


def test_contestant_rule_rejects_blank_names_and_negative_counts() -> None:
    with pytest.raises(Rejected, match="bad_contestant_name"):
        contestant({"contestant_number": 1, "contestant_name": " ", "num_votes": 0})
    with pytest.raises(Rejected, match="bad_num_votes"):
        contestant({"contestant_number": 1, "contestant_name": "A", "num_votes": -1})


def test_a_record_is_read_with_the_schema_it_names_and_an_unknown_one_fails_the_batch() -> None:
    """A record written while the stream's schema still had a field (dropped since) carries
    that schema's fingerprint; read with it, the field is skipped. Read as the reader's own
    layout it would not decode. A fingerprint the run was not given stops the batch."""
    current = schema("leaderboard.AcceptedVote")
    old = {k: v for k, v in current.items() if not k.startswith("__")}
    old["fields"] = [*current["fields"], {"name": "channel", "type": "string"}]
    written = BatchCodec(old)
    data = written.encode("accepted_votes", 7, [{**VOTE, "channel": "sms"}])
    source = PLAN.sources["app.accepted_votes"]
    assert isinstance(source, StreamSource)
    knowing = Plan(SCHEMAS, {"app.accepted_votes": replace(
        source, writers=((written.fingerprint, json.dumps(old)),)
    )})  # fmt: skip
    rec = replace(record("app.accepted_votes", data), writer=written.fingerprint)
    (out,) = Decoder(knowing).decode(rec)
    assert (out["batch_id"], out["reason"], json.loads(out["row"])) == (7, None, VOTE)
    (blind,) = decode(replace(rec, writer=None))  # no header: the reader's own layout
    assert blind["reason"] == "undecodable"
    with pytest.raises(UnknownWriterSchema, match=written.fingerprint):
        decode(rec)


def test_what_the_consistent_cut_needs_is_kept_from_unmirrored_changelog_records() -> None:
    """A prepared row's change names its 2PC transaction (a tombstone: applied here), and
    the end of a commit is kept as a marker even when its record goes to no mirror."""
    (put,) = decode(record("app.changelog", b"held", encode_key((PREPARED, "c3.17"))))
    assert (put["table"], put["row"], put["deleted"]) == (PREPARED, "c3.17", False)
    (applied,) = decode(record("app.changelog", None, encode_key((PREPARED, "c3.17"))))
    assert (applied["table"], applied["deleted"]) == (PREPARED, True)
    end = replace(record("app.changelog", b"x", encode_key(("phone_votes", 1))), commit_end=True)
    (marker,) = decode(end)
    assert (marker["table"], marker["commit_end"], marker["offset"]) == (COMMIT, True, 5)
    row = {"contestant_number": 3, "contestant_name": "Leonard Cohen", "num_votes": 7}
    value = encode_record(schema("leaderboard.Contestant"), row)
    last = replace(record("app.changelog", value, encode_key(("contestants", 3))), commit_end=True)
    (data,) = decode(last)
    assert (data["table"], data["commit_end"]) == ("contestants", True)


def test_a_commit_end_naming_spanning_parts_yields_one_marker_each() -> None:
    ((_, header),) = commit_end([SpanPart("transfers", 7, (0, 2)), SpanPart("transfers", 8, (2,))])
    end = replace(
        record("app.changelog", b"x", encode_key(("phone_votes", 1))),
        commit_end=True,
        spans=header.decode(),
    )
    seven, eight, marker = decode(end)
    assert (seven["table"], json.loads(seven["row"])) == (
        SPAN,
        {"txn": "span:transfers:7", "parts": [0, 2]},
    )
    assert json.loads(eight["row"])["txn"] == "span:transfers:8"
    assert marker["table"] == COMMIT
