"""In-memory stand-ins for pure-logic unit tests; integration tests use the real stores."""

from __future__ import annotations

import itertools
from typing import Any

from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.promises import promise_id
from txstream.oltp.messages import CLIENT_REQUEST_KINDS, EngineReply, EngineRequest, Fragment
from txstream.testing import MemoryState

# Places in the promises topic, which name promised transactions (`promise_id`).
_OFFSETS = itertools.count()


class MemoryBase(MemoryState):
    """The library's in-memory committed state (`txstream.testing`), comparable whole."""

    def snapshot(self) -> dict[str, Any]:
        return {"tables": {t: dict(r) for t, r in self.tables.items()}, "windows": self.windows}


def send(
    engine: PartitionEngine, kind: str, name: str, *frags: Fragment, epoch: int = 0
) -> EngineReply:
    """An OLTP request the engine must run now, and its reply; a promised one is named as
    the task names it, by its offset."""
    txn_id = promise_id(engine.partition, next(_OFFSETS)) if kind in CLIENT_REQUEST_KINDS else name
    req = EngineRequest(txn_id, epoch, kind, f"req-{name}", "client", list(frags))
    assert engine.participant.request(req)
    return engine.group.replies[-1]
