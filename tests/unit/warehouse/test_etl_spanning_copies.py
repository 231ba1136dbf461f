"""A spanning procedure's input holds a batch on several partitions: the warehouse loads
one copy of each, partition 0's when batches are broadcast, else the copy the producer
keyed as its lowest participant's (`routing.LEADER_KEY`)."""

from __future__ import annotations

from types import SimpleNamespace

from txstream.kafka.routing import LEADER_KEY
from txstream_etl.direct import DirectReader
from txstream_etl.plan import Plan, StreamSource


class _Msg:
    def __init__(self, key: bytes | None) -> None:
        self._key = key

    def key(self) -> bytes | None:
        return self._key


def _taken(broadcast: bool, partition: int, key: bytes | None) -> bool:
    source = StreamSource("transfers", "bank.Transfer", "transfers", "append",
                          broadcast=broadcast)  # fmt: skip
    reader = SimpleNamespace(plan=Plan("schemas", {"t": source}))
    return DirectReader._taken(reader, _Msg(key), "t", partition)  # type: ignore[arg-type]


def test_one_copy_of_each_spanning_batch_is_read() -> None:
    assert _taken(True, 0, None), "partition 0: broadcast, or 0 is the lowest participant"
    assert not _taken(True, 2, None), "another participant's copy"
    assert _taken(True, 2, LEADER_KEY), "the lowest participant's copy"
    assert _taken(False, 2, None), "a per-partition stream: every record"
