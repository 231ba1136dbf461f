"""The changelog's consistent cut (`txstream_etl.cut`): whole commits per partition, and a
2PC transaction applied inside the cut on every partition it was prepared on, or on none."""

from __future__ import annotations

from txstream.commit.markers import COMMIT_END_HEADER, commit_end, spans_of
from txstream.engine.group import SpanPart
from txstream_etl.cut import Marker, consistent_cut


def end(p: int, offset: int) -> Marker:
    return Marker(p, offset, commit_end=True)


def prepared(p: int, offset: int, txn: str, *, commit_end: bool = False) -> Marker:
    return Marker(p, offset, commit_end, txn)


def applied(p: int, offset: int, txn: str, *, commit_end: bool = False) -> Marker:
    return Marker(p, offset, commit_end, txn, applied=True)


def test_without_2pc_everything_read_lands() -> None:
    cut = consistent_cut([end(0, 4), end(0, 9), end(1, 3)], {0: 9, 1: 3})
    assert cut.upto == {0: 9, 1: 3}
    assert not cut.waiting and not cut.holds_back({0: 9, 1: 3})


def test_a_side_applied_before_the_other_waits_with_its_whole_commit() -> None:
    """Partition 0 applied T at offset 12 (its commit is 10-13); partition 1 holds T
    prepared and has not applied it: partition 0 ends before that commit."""
    markers = [
        prepared(0, 3, "T"), end(0, 4), end(0, 9), applied(0, 12, "T"), end(0, 13),
        prepared(1, 2, "T", commit_end=True), end(1, 6),
    ]  # fmt: skip
    last = {0: 13, 1: 6}
    cut = consistent_cut(markers, last)
    assert cut.upto == {0: 9, 1: 6}
    assert cut.waiting == {"T"} and cut.holds_back(last)


def test_both_sides_applied_inside_land_together() -> None:
    markers = [
        prepared(0, 3, "T", commit_end=True), applied(0, 7, "T"), end(0, 8),
        prepared(1, 1, "T", commit_end=True), applied(1, 5, "T", commit_end=True),
    ]  # fmt: skip
    cut = consistent_cut(markers, {0: 8, 1: 5})
    assert cut.upto == {0: 8, 1: 5} and not cut.waiting


def test_moving_one_partition_back_can_move_another() -> None:
    """U's commit on partition 0 also applied T, whose other side is not applied yet: so U
    cannot land on partition 0, and then not on partition 1 either (where it is whole)."""
    markers = [
        prepared(0, 1, "T"), prepared(0, 2, "U", commit_end=True),
        applied(0, 5, "T"), applied(0, 6, "U", commit_end=True),
        prepared(1, 1, "U", commit_end=True), applied(1, 3, "U"), end(1, 4), end(1, 7),
        prepared(2, 0, "T", commit_end=True),
    ]  # fmt: skip
    last = {0: 6, 1: 7, 2: 0}
    cut = consistent_cut(markers, last)
    assert cut.upto == {0: 2, 1: 1, 2: 0}
    assert cut.waiting == {"T", "U"}


def test_a_commit_whose_start_was_not_read_takes_nothing_of_its_partition() -> None:
    cut = consistent_cut([applied(0, 2, "T", commit_end=True), prepared(1, 0, "T")], {0: 2, 1: 0})
    assert cut.upto == {0: -1, 1: 0}


def test_a_transaction_prepared_and_applied_on_one_partition_is_whole() -> None:
    """Aborted on a partition whose prepare failed: only one side was ever prepared."""
    markers = [prepared(0, 0, "T", commit_end=True), applied(0, 1, "T", commit_end=True)]
    cut = consistent_cut(markers, {0: 1})
    assert cut.upto == {0: 1} and not cut.waiting


def test_a_prepared_transaction_not_yet_decided_waits_without_moving_the_cut() -> None:
    markers = [end(0, 2), prepared(0, 3, "T", commit_end=True), prepared(1, 0, "T")]
    cut = consistent_cut(markers, {0: 3, 1: 0})
    assert cut.upto == {0: 3, 1: 0} and cut.waiting == {"T"}


def span(p: int, offset: int, batch: int, parts: tuple[int, ...]) -> Marker:
    return Marker(p, offset, True, f"span:transfers:{batch}", True, parts)


def test_a_spanning_batch_lands_with_all_its_parts_or_waits() -> None:
    """Batch 7 has parts on partitions 0 and 2; partition 2 has not committed its part yet,
    so partition 0's commit holding it waits. Batch 6's parts are both in: it lands."""
    markers = [span(0, 3, 6, (0, 1)), span(1, 2, 6, (0, 1)), span(0, 8, 7, (0, 2)), end(2, 4)]
    last = {0: 8, 1: 2, 2: 4}
    cut = consistent_cut(markers, last)
    assert cut.upto == {0: 3, 1: 2, 2: 4}
    assert cut.waiting == {"span:transfers:7"}
    whole = consistent_cut([*markers, span(2, 9, 7, (0, 2))], {**last, 2: 9})
    assert whole.upto == {0: 8, 1: 2, 2: 9} and not whole.waiting


def test_the_commit_end_header_names_the_spanning_parts_and_reads_back() -> None:
    parts = [SpanPart("transfers", 7, (0, 2)), SpanPart("transfers", 8, (1, 2))]
    ((name, value),) = commit_end(parts)
    assert name == COMMIT_END_HEADER
    assert spans_of(value) == parts
    assert spans_of(commit_end([])[0][1]) == [] and spans_of(None) == []
