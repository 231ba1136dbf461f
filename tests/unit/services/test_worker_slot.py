"""Worker slots: one live holder per slot, the next free slot when none is asked for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from txstream_worker.slot import SlotHeld, WorkerSlot


def test_slots_without_an_id_are_distinct_and_freed_by_their_holder(tmp_path: Path) -> None:
    first = WorkerSlot.claim(tmp_path, "app", None)
    second = WorkerSlot.claim(tmp_path, "app", None)
    assert first.instance_id != second.instance_id
    assert first.instance_id.endswith("-0") and second.instance_id.endswith("-1")
    os.close(first.fd)  # as the kernel does when the holder dies
    again = WorkerSlot.claim(tmp_path, "app", None)
    assert again.instance_id == first.instance_id


def test_a_held_slot_names_its_holder(tmp_path: Path) -> None:
    WorkerSlot.claim(tmp_path, "app", "w/1")
    with pytest.raises(
        SlotHeld, match=rf"worker slot 'w/1' of app 'app' is held by pid {os.getpid()}"
    ):
        WorkerSlot.claim(tmp_path, "app", "w/1")
