"""`TaskReads`: reads waiting at a task are tried again only when their answer may have
changed. One that waits for a write to be committed (`Uncommitted`) is tried after a commit
was applied, not on every step of the delivery loop; one that waits for anything else (a
prepared transaction's lock) is tried on every step."""

from __future__ import annotations

from typing import Any, cast

from txstream.engine.committed_reads import CommittedReader, Conflict, Freshness, Uncommitted
from txstream.model.declarations import Key, Record
from txstream.runtime.reads import ReadRequest, TaskReads


class Reader:
    """Answers a row once `blocked` is empty; until then raises its first exception."""

    def __init__(self, *blocked: Exception) -> None:
        self.blocked = list(blocked)
        self.tried = 0

    def row(self, table: str, key: Key) -> Record | None:
        self.tried += 1
        if self.blocked:
            raise self.blocked[0]
        return {"table": table, "key": list(key)}

    def freshness(self, topics: Any, streams: Any) -> Freshness:
        return Freshness(0)


def serving(reader: Reader) -> TaskReads:
    reads = TaskReads()
    reads.serve(cast(CommittedReader, reader), (), ())
    return reads


def test_a_read_waiting_for_a_commit_is_tried_only_after_one_is_applied() -> None:
    reader = Reader(Uncommitted("row [1] of t has a write not yet committed"))
    reads = serving(reader)  # the task is busy (it holds its lock): the read waits in line
    [answer] = reads.ask([ReadRequest("t", (1,))])
    reads.answer_waiting()
    assert reader.tried == 1 and not answer.done()
    for _ in range(20):  # steps of the delivery loop while the commit is in flight
        reads.answer_waiting()
    assert reader.tried == 1, "tried again on steps that applied no commit"
    reader.blocked.clear()
    reads.committed()
    reads.answer_waiting()
    assert reader.tried == 2
    assert answer.result(0).row == {"table": "t", "key": [1]}


def test_one_still_blocked_after_a_commit_waits_for_the_next() -> None:
    reader = Reader(Uncommitted("in flight"), Uncommitted("the next one"))
    reads = serving(reader)
    [answer] = reads.ask([ReadRequest("t", (1,))])
    reads.answer_waiting()
    reader.blocked.pop(0)
    reads.committed()
    reads.answer_waiting()
    reads.answer_waiting()
    assert reader.tried == 2 and not answer.done()
    reader.blocked.clear()
    reads.committed()
    reads.answer_waiting()
    assert answer.result(0).row is not None


def test_a_read_waiting_for_a_lock_is_tried_on_every_step() -> None:
    reader = Reader(Conflict("t", (1,)))
    reads = serving(reader)
    [answer] = reads.ask([ReadRequest("t", (1,))])
    for _ in range(3):
        reads.answer_waiting()
    assert reader.tried == 3
    reader.blocked.clear()
    reads.answer_waiting()
    assert answer.result(0).ok
