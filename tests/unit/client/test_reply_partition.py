"""Which partition of the client reply topic a request's answer goes to (`reply_partition`):
the one its client reads, named in the request id; 0 for anything else."""

from __future__ import annotations

import os

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


def test_ids_made_in_a_forked_child_are_not_its_parents() -> None:
    """Ids are a per-process random prefix and a count: a child forked from a client
    draws its own prefix, or it would make the ids its parent makes next."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, request_id_for(1).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 200).decode()
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    parent = request_id_for(1)
    assert child and child != parent
    assert child[: len("r1-") + 16] != parent[: len("r1-") + 16], "another prefix"
