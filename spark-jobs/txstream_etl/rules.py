"""Cleaning rules: a row either leaves typed and checked, or is rejected with a reason.

The engine's own output is typed by its Avro schema, but the warehouse is shared with
anything else that writes these topics, and its readers rely on more than types (a phone
number has ten digits, a state is two letters). A rejected row goes to the quarantine table
with the rule's reason; the rest of its atomic batch still lands.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Row = dict[str, Any]

PHONE_MIN, PHONE_MAX = 2_000_000_000, 9_999_999_999  # NANP: ten digits, no leading 0 or 1
STATE = re.compile(r"[A-Z]{2}")


class Rejected(ValueError):
    """A row that must not reach its table; `reason` is a stable label for metrics."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _positive(row: Mapping[str, Any], name: str) -> None:
    value = row.get(name)
    if not isinstance(value, int) or value < 1:
        raise Rejected(f"bad_{name}", f"{name} must be a positive integer, got {value!r}")


def _phone(row: Mapping[str, Any]) -> None:
    value = row.get("phone_number")
    if not isinstance(value, int) or not PHONE_MIN <= value <= PHONE_MAX:
        raise Rejected("bad_phone_number", f"phone_number must have 10 digits, got {value!r}")


def accepted_vote(row: Row) -> Row:
    _positive(row, "vote_id")
    _phone(row)
    _positive(row, "contestant_number")
    if not isinstance(row.get("state"), str) or not STATE.fullmatch(row["state"]):
        raise Rejected("bad_state", f"state must be two capital letters, got {row.get('state')!r}")
    return row


def contestant(row: Row) -> Row:
    _positive(row, "contestant_number")
    name = row.get("contestant_name")
    if not isinstance(name, str) or not name.strip():
        raise Rejected("bad_contestant_name", f"contestant_name is empty: {name!r}")
    if not isinstance(row.get("num_votes"), int) or row["num_votes"] < 0:
        raise Rejected("bad_num_votes", f"num_votes must be >= 0, got {row.get('num_votes')!r}")
    return {**row, "contestant_name": name.strip()}


def ingested_vote(row: Row) -> Row:
    _positive(row, "vote_id")
    _phone(row)
    _positive(row, "contestant_number")
    return row


def any_row(row: Row) -> Row:
    return row


RULES: dict[str, Callable[[Row], Row]] = {
    "accepted_vote": accepted_vote,
    "contestant": contestant,
    "ingested_vote": ingested_vote,
    "any": any_row,
}
