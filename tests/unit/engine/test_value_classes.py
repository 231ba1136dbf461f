"""The hot path's value classes: made once per record, TE or window insert, so written as
classes of their own rather than dataclasses (mypyc makes them ~10x faster). They must
still compare by value, show their fields, and (compiled) refuse to be changed."""

from __future__ import annotations

from typing import Any

import pytest

from txstream import native
from txstream.engine.group import OutputBatch
from txstream.engine.windows import WindowState
from txstream.schemas.codec import Batch

ROW = {"vote_id": 1}


def test_a_batch_is_equal_by_value_and_shows_its_fields() -> None:
    assert Batch("votes", 1, [ROW]) == Batch("votes", 1, [dict(ROW)])
    assert Batch("votes", 1, [ROW]) != Batch("votes", 2, [ROW])
    assert Batch("votes", 1, [ROW]) != Batch("other", 1, [ROW])
    assert Batch("votes", 1, [ROW]) != ("votes", 1, [ROW])
    assert repr(Batch("votes", 1, [])) == "Batch(stream='votes', batch_id=1, tuples=[])"


def test_an_output_batch_is_equal_by_value_and_shows_its_fields() -> None:
    out = OutputBatch("accepted", 7, [ROW], b"r", "ship", 2)
    assert out == OutputBatch("accepted", 7, [dict(ROW)], b"r", "ship", 2)
    for other in (
        OutputBatch("accepted", 7, [ROW], b"r", "ship", 3),
        OutputBatch("accepted", 7, [ROW], None, "ship", 2),
        OutputBatch("accepted", 7, [ROW], b"r", None, 2),
        OutputBatch("accepted", 7, [], b"r", "ship", 2),
        OutputBatch("accepted", 8, [ROW], b"r", "ship", 2),
        OutputBatch("removals", 7, [ROW], b"r", "ship", 2),
    ):
        assert out != other
    bare = OutputBatch("accepted", 7, [])
    assert (bare.record, bare.hop, bare.partition) == (None, None, -1)
    assert repr(bare) == "OutputBatch(accepted, 7, [], record=None, hop=None, partition=-1)"


def test_a_window_state_is_equal_by_its_tuples_and_boundary_not_flatness() -> None:
    state = WindowState((ROW,), (), 10, True)
    assert state == WindowState((dict(ROW),), (), 10, False)  # flat: derived, not the value
    assert state != WindowState((), (ROW,), 10, True)
    assert state != WindowState((ROW,), (), 20, True)
    assert WindowState() == WindowState((), (), None, True)
    assert "boundary=10" in repr(state) and "flat=True" in repr(state)


@pytest.mark.skipif(
    not native.status().startswith("compiled"), reason="runs from source: read-only to mypy only"
)
@pytest.mark.parametrize(
    ("value", "field"),
    [
        (Batch("votes", 1, []), "batch_id"),
        (OutputBatch("accepted", 7, []), "tuples"),
        (WindowState(), "visible"),
    ],
)
def test_compiled_value_classes_refuse_a_change(value: Any, field: str) -> None:
    before = getattr(value, field)
    with pytest.raises(AttributeError, match="not writable"):
        setattr(value, field, 42)
    assert getattr(value, field) == before
