"""The tests' port helper: two draws in one process never give the same port.

CI saw a Spark master's RPC and UI ports drawn equal: the master moved its UI to the next
port and the readiness probe spoke HTTP to the RPC port.
"""

from __future__ import annotations

import random
from typing import ClassVar

import pytest

import tests.support.kafka_env as helpers


class _Scripted(random.Random):
    """Draws a fixed sequence, so the test can make the randomness collide."""

    script: ClassVar[list[int]] = []

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        if self.script:
            return self.script.pop(0)
        return super().randrange(start, stop, step)


def test_a_port_drawn_twice_is_handed_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first = helpers.free_port()
    _Scripted.script = [first, first, first + 1]
    monkeypatch.setattr(random, "Random", _Scripted)
    second = helpers.free_port()
    assert second != first
