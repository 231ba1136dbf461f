"""Which partition of the client reply topic a request's answer goes to (`reply_partition`):
the one its client reads, named in the request id; 0 for anything else."""

from __future__ import annotations

import pytest

from txstream.oltp.messages import reply_partition, request_id_for


@pytest.mark.parametrize("k", [0, 3, 7, 12])
def test_an_id_made_for_a_partition_is_answered_there(k: int) -> None:
    rid = request_id_for(k)
    assert reply_partition(rid, 16) == k
    assert request_id_for(k) != rid, "ids are unique"


@pytest.mark.parametrize(
    "rid", ["", "abc", "r", "r-1", "rx-1", "r1", "R1-x", "p.r1-x", "0123456789abcdef"]
)
def test_any_other_id_is_answered_on_partition_0(rid: str) -> None:
    assert reply_partition(rid, 8) == 0


def test_a_partition_the_topic_lacks_falls_back_to_0() -> None:
    """An app made when the reply topic had one partition keeps working."""
    assert reply_partition(request_id_for(5), 1) == 0
    assert reply_partition(request_id_for(5), 5) == 0
    assert reply_partition(request_id_for(5), 6) == 5
