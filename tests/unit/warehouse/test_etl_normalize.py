"""Dirty vote events, in each format clients send, to typed rows or named rejections."""

from __future__ import annotations

import pytest

from txstream_etl.normalize import Malformed, normalize


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"1,(617) 555-0101,3,2026-11-22T07:00:00Z",
         (1, 6175550101, 3, "2026-11-22T07:00:00.000+00:00", "csv")),
        (b'2,"+1 212-555-0199",4,2026-11-22T09:30:00+02:00',
         (2, 2125550199, 4, "2026-11-22T07:30:00.000+00:00", "csv")),
        (b"3,6175550102,5,2026-11-22T07:00:00",  # no offset: UTC
         (3, 6175550102, 5, "2026-11-22T07:00:00.000+00:00", "csv")),
        (b'{"voteId": "4", "phone": 6175550103, "contestant": 6.0, "castAtMs": 1763794800250}',
         (4, 6175550103, 6, "2025-11-22T07:00:00.250+00:00", "json-web")),
        (b'{"id": 5, "msisdn": "16175550104", "candidate": "7", "ts": 1763794800}',
         (5, 6175550104, 7, "2025-11-22T07:00:00.000+00:00", "json-sms")),
    ],
)  # fmt: skip
def test_each_format_becomes_the_same_row(payload: bytes, expected: tuple[object, ...]) -> None:
    row = normalize(payload)
    names = ("vote_id", "phone_number", "contestant_number", "cast_at", "source_format")
    assert tuple(row[n] for n in names) == expected


@pytest.mark.parametrize(
    ("payload", "reason", "named"),
    [
        (b"vote_id,phone_number,contestant_number,cast_at", "unparseable", "header"),
        (b"1,6175550101,3", "unparseable", "4 fields"),
        (b'{"voteId": 1,', "unparseable", "invalid JSON"),
        (b"[1, 2]", "unparseable", "object"),
        (b'{"vote": 1}', "unknown_format", "vote"),
        (b'{"voteId": 1, "phone": "", "contestant": 3, "castAtMs": 1}', "missing_field", "phone"),
        (b"1,6175550101,three,2026-11-22T07:00:00Z", "bad_number", "contestant_number"),
        (b'{"id": true, "msisdn": "6175550101", "candidate": 3, "ts": 1763794800}',
         "bad_number", "vote_id"),
        (b"1,555-0101,3,2026-11-22T07:00:00Z", "bad_phone_number", "555-0101"),
        (b"1,1175550101,3,2026-11-22T07:00:00Z", "bad_phone_number", "1175550101"),
        (b"1,6175550101,3,yesterday", "bad_timestamp", "yesterday"),
        (b'{"id": 1, "msisdn": "6175550101", "candidate": 3, "ts": 1763794800000}',
         "bad_timestamp", "ts"),  # milliseconds where seconds are due
        (b'{"id": 1, "msisdn": "6175550101", "candidate": 3, "ts": "now"}', "bad_timestamp", "now"),
        (b"\xff1,6175550101,3,2026-11-22T07:00:00Z", "not_utf8", "byte 0"),
    ],
)  # fmt: skip
def test_malformed_events_are_rejected_naming_the_problem(
    payload: bytes, reason: str, named: str
) -> None:
    with pytest.raises(Malformed) as e:
        normalize(payload)
    assert e.value.reason == reason
    assert named in e.value.detail
