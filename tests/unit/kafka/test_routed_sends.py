"""RoutedSends: where a transaction's routed spanning batches go, and who gets a mark."""

from __future__ import annotations

from txstream.kafka.routing import LEADER_KEY, RoutedSends, fragment_partition, partition_of
from txstream.oltp.messages import key_json


def test_the_lowest_participants_copy_is_keyed_as_the_leader() -> None:
    sends = RoutedSends(4)
    assert sends.copies(7, [1, 3]) == [(1, LEADER_KEY), (3, None)]
    assert sends.copies(8, [2]) == [(2, LEADER_KEY)]


def test_partitions_that_missed_the_last_batch_are_marked() -> None:
    sends = RoutedSends(4)
    sends.copies(1, [0, 1])
    sends.copies(2, [1, 2])
    assert sends.top == 2
    assert sends.behind(2) == [0, 3]  # 0 got batch 1 only; 3 got nothing


def test_a_higher_top_from_another_stream_marks_every_partition_below_it() -> None:
    sends = RoutedSends(3)
    sends.copies(5, [0, 1, 2])
    assert sends.behind(5) == []
    assert sends.behind(6) == [0, 1, 2]


def test_cleared_it_has_sent_nothing() -> None:
    sends = RoutedSends(2)
    sends.copies(3, [0])
    sends.clear()
    assert sends.top is None
    assert sends.behind(1) == [0, 1]


def test_a_fragments_key_text_places_as_its_key_does() -> None:
    for key in [(1,), ("a", 2), (-5, "x", 7)]:
        for partitions in (1, 4, 7):
            assert fragment_partition(key_json(key), partitions) == partition_of(key, partitions)
