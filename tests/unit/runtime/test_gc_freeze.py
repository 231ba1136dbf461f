"""Start-up objects frozen out of the collector's full walks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from txstream.runtime.gc_freeze import freeze_startup_objects


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_live_objects_are_frozen_and_garbage_is_not(unfrozen: None) -> None:
    kept = [object() for _ in range(1000)]
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle  # garbage: collected first, so not frozen with the rest
    frozen = freeze_startup_objects()
    # another thread of the test process may free a frozen object meanwhile: never add one
    assert frozen >= gc.get_freeze_count() >= len(kept)
    assert not gc.get_objects(generation=2)  # nothing left for a full collection to walk
    assert gc.collect() == 0
