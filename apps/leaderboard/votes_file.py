"""S-Store's votes-file format: one `vote_id phone_number contestant_number` per line.

Files can be far larger than memory, so everything here streams. Parsing is strict (exactly
three plain decimal integers, each a signed 64-bit value) because every field ends up in an Avro
long, and a bad line must stop the runner with the file and line named, before any of the file
has been loaded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

FIELDS = ("vote_id", "phone_number", "contestant_number")
MAX_VALUE = 2**63 - 1
_DIGITS = re.compile(rb"[0-9]+")


@dataclass(frozen=True, slots=True)
class Vote:
    """One text-message vote, as it appears on a line of a votes file."""

    vote_id: int
    phone_number: int
    contestant_number: int


@dataclass(frozen=True, slots=True)
class VoteBatch:
    """Atomic input batch `batch_id` (1-based): lines (batch_id-1)*K+1 .. batch_id*K."""

    batch_id: int
    votes: tuple[Vote, ...]


class VotesFileError(ValueError):
    """A malformed line; the message names the file and the 1-based line number."""

    def __init__(self, path: Path, line_number: int, reason: str) -> None:
        super().__init__(f"{path}:{line_number}: {reason}")
        self.path = path
        self.line_number = line_number
        self.reason = reason


def _field(raw: bytes, name: str, path: Path, line_number: int) -> int:
    shown = raw.decode("utf-8", errors="replace")
    if _DIGITS.fullmatch(raw):
        value = int(raw)
        if value > MAX_VALUE:
            raise VotesFileError(path, line_number, f"{name} {shown} is too large (max 2**63-1)")
        return value
    if raw.startswith(b"-") and _DIGITS.fullmatch(raw[1:]):
        raise VotesFileError(path, line_number, f"{name} {shown} is negative")
    raise VotesFileError(
        path, line_number, f"{name} {shown!r} is not a non-negative decimal integer"
    )


def _parse(raw_line: bytes, path: Path, line_number: int) -> Vote:
    fields = raw_line.split()
    if len(fields) != len(FIELDS):
        raise VotesFileError(
            path, line_number, f"expected 3 fields ({' '.join(FIELDS)}), got {len(fields)}"
        )
    vote_id, phone_number, contestant_number = (
        _field(raw, name, path, line_number) for raw, name in zip(fields, FIELDS, strict=True)
    )
    return Vote(vote_id, phone_number, contestant_number)


def iter_votes(path: Path | str) -> Iterator[Vote]:
    """The file's votes in order, one line at a time."""
    path = Path(path)
    with path.open("rb") as f:
        for line_number, raw_line in enumerate(f, start=1):
            yield _parse(raw_line, path, line_number)


def iter_batches(path: Path | str, batch_size: int) -> Iterator[VoteBatch]:
    """The file cut into atomic batches of `batch_size` votes; only the last may be shorter."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    batch: list[Vote] = []
    batch_id = 1
    for vote in iter_votes(path):
        batch.append(vote)
        if len(batch) == batch_size:
            yield VoteBatch(batch_id, tuple(batch))
            batch = []
            batch_id += 1
    if batch:
        yield VoteBatch(batch_id, tuple(batch))


def validate_votes_file(path: Path | str) -> int:
    """Check every line, so a caller can refuse the file before loading any of it.

    Returns the number of votes. Raises VotesFileError on the first malformed line, and
    OSError when the file cannot be read.
    """
    return sum(1 for _ in iter_votes(path))


def format_vote(vote: Vote) -> str:
    """The vote's line, without the newline."""
    return f"{vote.vote_id} {vote.phone_number} {vote.contestant_number}"


def write_votes(path: Path | str, votes: Iterable[Vote]) -> int:
    """Write a votes file and return how many votes it holds.

    The file appears complete or not at all: it is written beside the target and renamed, so
    a reader never sees half a file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    count = 0
    try:
        with tmp.open("w", encoding="ascii", newline="\n") as f:
            for vote in votes:
                f.write(format_vote(vote) + "\n")
                count += 1
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return count
