"""How hard the fault suite pushes: short in `make test`, long in `make faults`.

Every run is seeded. A failing run names its seed in the test id; set
`TXSTREAM_FAULT_SEED=<seed>` to run exactly that seed again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

LONG = os.environ.get("TXSTREAM_FAULTS", "short") == "long"


def seeds(short: list[int], long: list[int]) -> list[int]:
    """The seeds to run: one fixed seed, or the list for the current scale."""
    fixed = os.environ.get("TXSTREAM_FAULT_SEED")
    if fixed:
        return [int(fixed)]
    return long if LONG else short


def scaled(short: int, long: int) -> int:
    return long if LONG else short


def cases(short: Sequence[T], long: Sequence[T]) -> list[T]:
    """The cases to run: a few in `make test`, which must stay well under 20 minutes, and
    every one in `make faults`."""
    return list(long if LONG else short)
