"""In-memory stand-ins for pure-logic unit tests; integration tests use the real stores."""

from __future__ import annotations

from typing import Any

from txstream.testing import MemoryState


class MemoryBase(MemoryState):
    """The library's in-memory committed state (`txstream.testing`), comparable whole."""

    def snapshot(self) -> dict[str, Any]:
        return {"tables": {t: dict(r) for t, r in self.tables.items()}, "windows": self.windows}
