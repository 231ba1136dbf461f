"""The commit pipeline: the one place that decides when a group commits, and runs it.

A partition commits one group at a time, and processing goes on while it is in flight:

    due()     ->  submit()            ->  poll() / drain()
    decide        steps 1-3 of the        step 4 (RocksDB) once the transaction is
                  group commit, on its    done; returns the commit, APPLIED, for the
                  thread (SENDING)        task's post-commit work

Each commit is a `Commit` with a status, so a reader (or a test) sees which phase it is in
and a failed one is never taken for done. The steps themselves, and why their order is
exactly-once, are `GroupCommitter`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import Enum

from txstream.commit.group_commit import GroupCommitter, Sent
from txstream.commit.policy import OLTP_GROUP_MS, CommitPolicy
from txstream.engine.group import CommitGroup
from txstream.oltp.messages import EngineReply

# While a commit is in flight the delivery loop looks back this often, to start the next.
IN_FLIGHT_POLL_S = 0.001


class CommitStatus(Enum):
    SENDING = "sending"  # steps 1-3 on the commit thread
    APPLIED = "applied"  # the transaction committed and RocksDB has its writes
    FAILED = "failed"  # the transaction or the apply failed: the engine restarts


@dataclass(frozen=True)
class CommitSummary:
    """What a committed group held, for callers that follow progress."""

    batches: int
    aborts: int
    last: Mapping[str, int]  # stream -> the last batch id committed on it

    @classmethod
    def none(cls) -> CommitSummary:
        return cls(0, 0, {})


@dataclass
class Commit:
    """One group on its way: what it carries, where it leaves the inputs, and its phase."""

    group: CommitGroup
    positions: dict[str, int]  # the inputs' next offsets once it commits
    sent: Future[Sent]
    started: float = field(default_factory=time.monotonic)
    status: CommitStatus = CommitStatus.SENDING

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    @property
    def summary(self) -> CommitSummary:
        group = self.group
        return CommitSummary(group.stats.batches, len(group.aborts), group.last_batch_ids)


class CommitPipeline:
    def __init__(self, committer: GroupCommitter, policy: CommitPolicy) -> None:
        self.committer = committer
        self.policy = policy
        self.in_flight: Commit | None = None
        self._opened = 0.0  # when the pending group took its first record

    def opened(self) -> None:
        """The pending group takes its first record now: its wait counts from here."""
        self._opened = time.monotonic()

    def due(
        self,
        group: CommitGroup,
        *,
        end_of_run: bool = False,
        backlog: bool = False,
        input_waits: bool = False,
    ) -> bool:
        """Whether to commit `group` now. `end_of_run`: the records at hand are all handled,
        which is when a waiting 2PC vote is committed (votes in one run share a commit),
        and any answer a client waits on, unless a commit is in flight; a decision's
        acknowledgement waits its interval (nobody waits on it, and committing each run's
        at once cost 2PC transfers 3-6% of their rate: docs/benchmarks.md).
        While one commit is in flight the group grows until that one is done, or until the
        size cap, so under load groups grow to fill the commit's round trips; with a
        `backlog` a group stays open for the policy's longer busy interval. `input_waits`:
        held input waits for this group's commit (spanning batches behind local work)."""
        if group.empty:
            return False
        if end_of_run and group.flags.urgent:
            return True
        full = group.stats.batches >= self.policy.max_batches
        if self.in_flight is not None and not self.in_flight.sent.done():
            return full
        if input_waits:
            return True
        if end_of_run and not backlog and (group.results or _awaited(group.replies)):
            # a client waits on each, and nothing else is at hand to join them: the
            # commit in flight, when there is one, is what groups answers under load
            return True
        wait_ms = self.policy.wait_ms(backlog)
        if group.replies or group.results:  # a client waits on each OLTP reply
            wait_ms = min(wait_ms, OLTP_GROUP_MS)
        return full or (time.monotonic() - self._opened) * 1000 >= wait_ms

    def idle_wait(self, group: CommitGroup, longest_s: float) -> float:
        """How long the delivery loop may wait for input before the pipeline needs it back:
        not past the pending group's commit, nor long after the commit in flight is done."""
        if self.in_flight is not None:
            return min(longest_s, IN_FLIGHT_POLL_S)
        if group.empty:
            return longest_s
        due_s = self.policy.interval_ms / 1000 - (time.monotonic() - self._opened)
        return min(longest_s, max(due_s, 0.0))

    def submit(self, group: CommitGroup, positions: dict[str, int]) -> Commit:
        """Start steps 1-3 for `group`, which leaves the inputs at `positions`. The commit
        before it must be finished (`drain`): one transaction at a time."""
        if self.in_flight is not None:
            raise RuntimeError("a commit is still in flight: drain() it before the next")
        commit = Commit(group, positions, self.committer.send(group, positions))
        self.in_flight = commit
        return commit

    def poll(self, wait: bool = False) -> Commit | None:
        """Finish the commit in flight if its transaction is done (with `wait`, once it is):
        step 4, its writes into RocksDB. Returns it APPLIED, or None if none finished.
        A failure marks it FAILED and is raised: the task must restart."""
        commit = self.in_flight
        if commit is None or not (wait or commit.sent.done()):
            return None
        self.in_flight = None
        try:
            self.committer.finish(commit.sent)
        except BaseException:
            commit.status = CommitStatus.FAILED
            raise
        commit.status = CommitStatus.APPLIED
        return commit

    def drain(self) -> Commit | None:
        """Wait for the commit in flight, if any, and finish it (`poll`)."""
        return self.poll(wait=True)

    def abandon(self) -> None:
        """Let the commit in flight end without applying it (after a failure: RocksDB is
        only a cache of the log, and the restart replays it), and stop the commit thread."""
        commit, self.in_flight = self.in_flight, None
        if commit is not None:
            commit.sent.exception()  # waits for the thread; its error, if any, is moot now
            commit.status = CommitStatus.FAILED
        self.committer.close()


def _awaited(replies: Sequence[EngineReply]) -> bool:
    """Whether a client waits on one of `replies` (all but a decision's acknowledgement)."""
    return any(r.kind != "ack" for r in replies)
