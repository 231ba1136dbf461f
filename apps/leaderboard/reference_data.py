"""The workload's fixed reference data: area codes with their states, and contestant names.

The CSVs ship inside the package (`data/`), so an installed txstream needs no checkout beside
it. A directory can still be passed, for tests or for other data of the same shape.
"""

from __future__ import annotations

import csv
from pathlib import Path

DEFAULT_DATA_DIR = Path(__file__).parent / "data"
AREA_CODES_FILE = "area_code_state.csv"
CONTESTANTS_FILE = "contestants.csv"


Row = dict[str, object]


class ReferenceDataError(ValueError):
    """A reference CSV is missing a column or holds a value of the wrong kind."""


def _rows(path: Path, header: tuple[str, str]) -> list[tuple[int, str, str]]:
    """(line number, first, second) per data row, after checking the header."""
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        found = tuple(next(reader, ()))
        if found != header:
            raise ReferenceDataError(f"{path}:1: expected header {header}, found {found}")
        rows: list[tuple[int, str, str]] = []
        for row in reader:
            if len(row) != 2:
                raise ReferenceDataError(
                    f"{path}:{reader.line_num}: expected 2 fields, got {len(row)}"
                )
            rows.append((reader.line_num, row[0], row[1]))
        return rows


def _number(path: Path, line: int, text: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise ReferenceDataError(f"{path}:{line}: {text!r} is not a number")
    return int(text)


def load_area_code_states(data_dir: Path = DEFAULT_DATA_DIR) -> dict[int, str]:
    """Area code -> two-letter state, in file order.

    The order matters: the vote generator gives each area code a favourite contestant by its
    position in this list, as S-Store's generator does with its built-in list (same order).
    """
    path = data_dir / AREA_CODES_FILE
    states: dict[int, str] = {}
    for line, code, state in _rows(path, ("area_code", "state")):
        area_code = _number(path, line, code)
        if area_code in states:
            raise ReferenceDataError(f"{path}:{line}: area code {area_code} appears twice")
        states[area_code] = state
    if not states:
        raise ReferenceDataError(f"{path}: no area codes")
    return states


def load_contestant_names(data_dir: Path = DEFAULT_DATA_DIR) -> list[str]:
    """The name list, whose numbers must run 1, 2, ... so that position = number - 1."""
    path = data_dir / CONTESTANTS_FILE
    names: list[str] = []
    for line, number, name in _rows(path, ("contestant_number", "contestant_name")):
        if _number(path, line, number) != len(names) + 1:
            raise ReferenceDataError(f"{path}:{line}: expected contestant {len(names) + 1}")
        names.append(name)
    if not names:
        raise ReferenceDataError(f"{path}: no contestants")
    return names


def contestants(count: int, data_dir: Path = DEFAULT_DATA_DIR) -> dict[int, str]:
    """Contestants 1..count with their names; names wrap around when count exceeds the list."""
    if count < 1:
        raise ValueError(f"need at least one contestant, got {count}")
    names = load_contestant_names(data_dir)
    return {number: names[(number - 1) % len(names)] for number in range(1, count + 1)}


def reference_batches(count: int, data_dir: Path = DEFAULT_DATA_DIR) -> dict[str, list[Row]]:
    """The reference data as the tuples of batch 1 of its two streams: contestants 1..count
    with no votes yet (`contestant_rows`), and area codes with their states
    (`area_code_rows`)."""
    return {
        "contestant_rows": [
            {"contestant_number": n, "contestant_name": name, "num_votes": 0}
            for n, name in contestants(count, data_dir).items()
        ],
        "area_code_rows": [
            {"area_code": a, "state": s} for a, s in load_area_code_states(data_dir).items()
        ],
    }
