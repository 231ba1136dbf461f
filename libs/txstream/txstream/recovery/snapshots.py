"""Snapshots: RocksDB checkpoints of one engine's state, named by the log offset they reach.

A checkpoint records its own log offset inside the store (written with the data by every
apply), so the directory name is only for ordering. A checkpoint is made under a temporary
name and renamed, so a crash never leaves a half-written snapshot that looks complete.
"""

from __future__ import annotations

import logging
from pathlib import Path

from txstream.state.store import StateStore

log = logging.getLogger(__name__)

_TMP = ".partial-"


class Snapshots:
    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep

    def take(self, store: StateStore, offset: int) -> Path:
        """Checkpoint `store`, whose state reaches log `offset`; drop the oldest beyond `keep`."""
        final = self.root / f"{offset:020d}"
        if not final.exists():
            partial = self.root / f"{_TMP}{offset:020d}"
            StateStore.wipe(partial)
            store.checkpoint(partial)
            partial.rename(final)
            log.info("snapshot at log offset %d: %s", offset, final)
        for _, old in self.newest_first()[self.keep :]:
            StateStore.wipe(old)
        return final

    def newest_first(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = [(int(p.name), p) for p in self.root.iterdir() if p.name.isdigit()]
        return sorted(found, reverse=True)

    def oldest_offset(self) -> int | None:
        """The log offset a truncation must keep: the oldest snapshot may be the one needed."""
        kept = self.newest_first()
        return kept[-1][0] if kept else None
