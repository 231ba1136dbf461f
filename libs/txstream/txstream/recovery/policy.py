"""How an application recovers, and when its snapshots are taken.

`changelog` writes every state change to a compacted topic; restore replays the changes.
`strong` logs every TE and replays them in commit order with PE triggers off; `weak` logs
only border TEs and replays them with triggers on, recomputing the interior (upstream
backup). The logged modes write far less per group; they pay for it at recovery time.
"""

from __future__ import annotations

from dataclasses import dataclass

from txstream.engine.group import Journal
from txstream.model.declarations import RecoveryMode


@dataclass(frozen=True)
class RecoveryPolicy:
    """Snapshot after `snapshot_every_batches` batches or `snapshot_interval_s` seconds,
    whichever comes first (0 turns that trigger off); keep the newest `keep_snapshots`."""

    mode: RecoveryMode = RecoveryMode.CHANGELOG
    snapshot_every_batches: int = 50_000
    snapshot_interval_s: float = 600.0
    keep_snapshots: int = 2

    @property
    def journal(self) -> Journal:
        """What the engine records of each execution for this mode's command log."""
        return {
            RecoveryMode.CHANGELOG: Journal.NONE,
            RecoveryMode.STRONG: Journal.ALL,
            RecoveryMode.WEAK: Journal.BORDER,
        }[self.mode]

    def __post_init__(self) -> None:
        if self.snapshot_every_batches < 0 or self.snapshot_interval_s < 0:
            raise ValueError("snapshot triggers must be >= 0 (0 turns a trigger off)")
        if self.keep_snapshots < 1:
            raise ValueError(f"keep_snapshots must be >= 1, not {self.keep_snapshots}")
