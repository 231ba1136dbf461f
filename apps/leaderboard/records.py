"""The Leaderboard's records as Python types: the same Avro records as its `.avsc` files
under `schemas/leaderboard/` (the registry refuses a type that differs from its file), so
either form writes the same bytes. `build_app(..., typed=True)` declares with these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from txstream import Int32


class Vote(TypedDict):
    """One viewer vote as it arrives."""

    vote_id: int
    phone_number: int
    contestant_number: int


class AcceptedVote(TypedDict):
    """A vote that passed validation, with the voter's state."""

    vote_id: int
    phone_number: int
    contestant_number: int
    state: str


class AreaCode(TypedDict):
    """Which state an area code belongs to."""

    area_code: Int32
    state: str


@dataclass
class Contestant:
    """A contestant, with the votes counted so far."""

    contestant_number: int
    contestant_name: str
    num_votes: int = 0


class Count(TypedDict):
    """A counter."""

    value: int


class Removal(TypedDict):
    """A contestant removed, with its votes and when."""

    contestant_number: int
    num_votes: int
    at_accepted: int


class RemovalDue(TypedDict):
    """A removal is due after this many accepted votes."""

    at_accepted: int


class Seen(TypedDict):
    """A marker row: the key alone says it."""
