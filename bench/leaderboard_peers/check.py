"""One system's measured run, and its result checked against the serial reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESULT_KEYS = ("accepted", "rejected", "contestants", "removed", "top3", "bottom3", "trending3")


@dataclass
class Measured:
    """A system's run over the votes: `batches` in `seconds` (see `timing` for the clock)."""

    system: str
    guarantees: str
    batches: int
    seconds: float
    timing: str
    doc: dict[str, Any] | None
    differences: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def rate(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0

    @property
    def correct(self) -> bool:
        return self.error is None and self.doc is not None and not self.differences


def differences(doc: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """The keys of the result document that differ from the reference, with both values
    (cut short); empty when the result is correct. Extra keys are allowed (spec)."""
    out = []
    for key in RESULT_KEYS:
        got, want = doc.get(key), reference[key]
        if got != want:
            out.append(f"{key}: got {_short(got)}, reference {_short(want)}")
    return out


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
