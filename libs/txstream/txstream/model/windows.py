"""Window declarations: ROWS n SLIDE s, or RANGE t SLIDE s over a time field.

Plain, validated specs, checked when declared so a bad app fails at start-up; what a window
holds and how it slides is the engine's (`engine.windows`).
"""

from __future__ import annotations

from dataclasses import dataclass


def _check_positive(window: str, name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{window}: {name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, slots=True)
class TupleWindowSpec:
    """ROWS `rows` SLIDE `slide`; checked on construction so a bad app fails when declared."""

    rows: int
    slide: int

    def __post_init__(self) -> None:
        window = f"ROWS {self.rows!r} SLIDE {self.slide!r}"
        _check_positive(window, "rows", self.rows)
        _check_positive(window, "slide", self.slide)
        if self.slide > self.rows:
            raise ValueError(
                f"{window}: slide must be <= rows, got slide={self.slide} > rows={self.rows}"
            )


@dataclass(frozen=True, slots=True)
class TimeWindowSpec:
    """RANGE `range` SLIDE `slide` over `time_field`; checked on construction like ROWS."""

    range: int
    slide: int
    time_field: str

    def __post_init__(self) -> None:
        window = f"RANGE {self.range!r} SLIDE {self.slide!r}"
        _check_positive(window, "range", self.range)
        _check_positive(window, "slide", self.slide)
        if self.slide > self.range:
            raise ValueError(
                f"{window}: slide must be <= range, got slide={self.slide} > range={self.range}"
            )
        if not isinstance(self.time_field, str) or not self.time_field:
            raise ValueError(f"{window}: time_field must be a field name, got {self.time_field!r}")


WindowSpec = TupleWindowSpec | TimeWindowSpec
