"""One raw vote event, in any of the formats clients send, to one typed vote row.

S-Store's real-time ingestion case: input comes from several systems, each with its own
format, field names and units, and some of it is broken. Three formats arrive on one topic:

- CSV lines from the call centre: `vote_id,phone_number,contestant_number,cast_at` with an
  ISO-8601 time (UTC when it has no offset) and phone numbers as people type them;
- JSON from the web app: `{"voteId", "phone", "contestant", "castAtMs"}`, time in milliseconds;
- JSON from the SMS gateway: `{"id", "msisdn", "candidate", "ts"}`, time in seconds.

Every event becomes `{vote_id, phone_number, contestant_number, cast_at, source_format}`
(`cast_at` ISO-8601 UTC) or raises `Malformed` with a reason label and a detail naming the
bad field and value, which the ETL records in its quarantine table.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from typing import Any

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
CSV_FIELDS = ("vote_id", "phone_number", "contestant_number", "cast_at")
# JSON dialects, told apart by a field only they have: field names, then the time's unit.
WEB = {"vote_id": "voteId", "phone_number": "phone", "contestant_number": "contestant"}
SMS = {"vote_id": "id", "phone_number": "msisdn", "contestant_number": "candidate"}


class Malformed(ValueError):
    """An event that cannot become a vote; `reason` is a stable label for metrics."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def normalize(payload: bytes) -> dict[str, Any]:
    try:
        text = payload.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        raise Malformed("not_utf8", f"byte {e.start} is not UTF-8") from e
    if text[:1] in ("{", "["):
        return _from_json(text)
    return _from_csv(text)


def _from_csv(text: str) -> dict[str, Any]:
    rows = list(csv.reader([text]))
    fields = [f.strip() for f in rows[0]] if rows else []
    if len(fields) != len(CSV_FIELDS):
        raise Malformed("unparseable", f"CSV line needs {len(CSV_FIELDS)} fields, got {text!r}")
    if fields[0] == CSV_FIELDS[0]:
        raise Malformed("unparseable", "a CSV header line, not a vote")
    values = dict(zip(CSV_FIELDS, fields, strict=True))
    return _vote(values, _iso_time(values["cast_at"]), "csv")


def _from_json(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise Malformed("unparseable", f"invalid JSON at column {e.colno}: {e.msg}") from e
    if not isinstance(obj, dict):
        raise Malformed("unparseable", f"JSON event must be an object, got {type(obj).__name__}")
    if "voteId" in obj:
        names, time_field, per_second, fmt = WEB, "castAtMs", 1000, "json-web"
    elif "msisdn" in obj:
        names, time_field, per_second, fmt = SMS, "ts", 1, "json-sms"
    else:
        raise Malformed("unknown_format", f"JSON fields {sorted(obj)} match no known sender")
    values = {ours: _field(obj, theirs) for ours, theirs in names.items()}
    return _vote(values, _epoch_time(_field(obj, time_field), per_second, time_field), fmt)


def _field(obj: dict[str, Any], name: str) -> Any:
    if obj.get(name) in (None, ""):
        raise Malformed("missing_field", f"field {name!r} is missing or empty")
    return obj[name]


def _vote(values: dict[str, Any], cast_at: datetime, fmt: str) -> dict[str, Any]:
    return {
        "vote_id": _integer(values["vote_id"], "vote_id"),
        "phone_number": _phone(values["phone_number"]),
        "contestant_number": _integer(values["contestant_number"], "contestant_number"),
        "cast_at": cast_at.isoformat(timespec="milliseconds"),
        "source_format": fmt,
    }


def _integer(value: Any, name: str) -> int:
    """An int, from an int, an integral float, or a decimal string."""
    if isinstance(value, bool):
        raise Malformed("bad_number", f"{name} is a boolean: {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise Malformed("bad_number", f"{name} is not an integer: {value!r}")


def _phone(value: Any) -> int:
    """Ten digits, however written: '(617) 555-0101', '+1 617 555 0101', 6175550101."""
    digits = "".join(ch for ch in str(value) if ch.isdigit())
    if len(digits) == 11 and digits.startswith("1"):
        digits = digits[1:]  # the country code
    if len(digits) != 10 or digits[0] in "01":
        raise Malformed("bad_phone_number", f"phone number {value!r} is not 10 digits")
    return int(digits)


def _checked(t: datetime, raw: Any, name: str) -> datetime:
    if not EARLIEST <= t < LATEST:
        raise Malformed("bad_timestamp", f"{name} {raw!r} is {t.isoformat()}, out of range")
    return t


def _iso_time(text: str) -> datetime:
    try:
        t = datetime.fromisoformat(text)
    except ValueError as e:
        raise Malformed("bad_timestamp", f"cast_at {text!r} is not an ISO-8601 time") from e
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return _checked(t, text, "cast_at")


def _epoch_time(value: Any, per_second: int, name: str) -> datetime:
    """Seconds or milliseconds since the epoch; a value in the wrong unit is out of range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Malformed("bad_timestamp", f"{name} is not a number: {value!r}")
    try:
        t = datetime.fromtimestamp(value / per_second, UTC)
    except (OverflowError, OSError, ValueError) as e:
        raise Malformed("bad_timestamp", f"{name} {value!r} is not a time") from e
    return _checked(t, value, name)
