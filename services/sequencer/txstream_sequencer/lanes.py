"""Sealing rules for one border-stream partition (a lane), with no Kafka in sight.

With client batch ids, a batch is sealed when an event with a higher id arrives or when the
lane has been idle for `seal_after_ms`. Without ids, a batching policy cuts batches by count,
age and size and numbers them itself. Everything a lane cannot seal goes out as a dead letter
with its reason; exact re-sends are dropped. Only batches *emitted* (released by the gate,
if any) change the durable `LaneState`, so state written to Kafka never runs ahead of the
batches written with it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from txstream_sequencer.events import Event

RECENT_DIGESTS = 1024  # per lane: how far back an exact re-send is still recognised


class Reason(StrEnum):
    LATE = "late"
    OUT_OF_ORDER = "out_of_order"
    SCHEMA = "schema"
    UNDECODABLE = "undecodable"
    OVERSIZED = "oversized"


@dataclass(frozen=True)
class DeadLetter:
    reason: Reason
    error: str
    event: Event


@dataclass
class Sealed:
    batch_id: int
    events: list[Event]
    digest: bytes

    @property
    def tuples(self) -> list[dict[str, Any]]:
        return [e.value for e in self.events]


@dataclass
class LaneState:
    """What a lane must remember across a crash; written with every emitted batch.

    After a crash the input is re-read from the lowest offset any lane still held, so a lane
    must recognise the events it already handled (sealed, dead-lettered or dropped) and
    committed. Per input partition that is every offset below `through`, plus the few in
    `above`: events handled while an earlier one of the same partition was still open.
    """

    last: int | None = None
    recent: OrderedDict[int, bytes] = field(default_factory=OrderedDict)
    through: dict[tuple[str, int], int] = field(default_factory=dict)
    above: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    changed: bool = False  # since it was last written

    def handled(self, event: Event) -> bool:
        topic, part, offset = event.position
        key = (topic, part)
        return offset < self.through.get(key, 0) or offset in self.above.get(key, ())

    def mark(self, events: list[Event]) -> None:
        self.changed = True
        for e in events:
            topic, part, offset = e.position
            self.above.setdefault((topic, part), set()).add(offset)

    def compact(self, floor: dict[tuple[str, int], int]) -> None:
        """Fold handled offsets into `through`, up to the lowest one still held (`floor`)."""
        for key in set(self.above) | set(floor):
            marked = self.above.get(key, set())
            start = self.through.get(key, 0)
            through = floor.get(key, max(marked, default=start - 1) + 1)
            self.through[key] = max(start, through)
            rest = {o for o in marked if o >= self.through[key]}
            if rest:
                self.above[key] = rest
            else:
                self.above.pop(key, None)


@dataclass(frozen=True)
class Limits:
    max_events: int = 10_000
    max_bytes: int = 900_000  # under Kafka's default 1 MB record limit, envelope included
    seal_after_ms: int = 200  # id mode: idle time that seals the open batch
    policy_events: int | None = None  # policy mode: cut after this many events ...
    policy_ms: int | None = None  # ... or this age


def digest(events: list[Event]) -> bytes:
    h = hashlib.sha256()
    for e in events:
        h.update(len(e.payload).to_bytes(8, "big"))
        h.update(e.payload)
    return h.digest()[:16]


@dataclass
class _Open:
    batch_id: int | None
    events: list[Event] = field(default_factory=list)
    size: int = 0
    started_ms: float = 0.0
    touched_ms: float = 0.0

    def add(self, event: Event, now_ms: float) -> None:
        if not self.events:
            self.started_ms = now_ms
        self.events.append(event)
        self.size += event.size
        self.touched_ms = now_ms


@dataclass
class Output:
    """What one step of a lane produced, for the runtime to write and count."""

    sealed: list[Sealed] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    duplicates: list[Sealed] = field(default_factory=list)


class Lane:
    def __init__(self, name: str, limits: Limits, state: LaneState, policy: bool) -> None:
        self.name = name  # e.g. "votes[0]", for messages
        self.limits = limits
        self.state = state
        self.policy = policy
        self.open: _Open | None = None
        self.resend: _Open | None = None
        self.queued: deque[Sealed] = deque()
        self.poisoned: int | None = None

    # -- input ---------------------------------------------------------------------------

    def add(self, event: Event, now_ms: float, out: Output) -> None:
        if self.state.handled(event):
            return
        if self.policy:
            self._add_policy(event, now_ms, out)
        else:
            self._add_with_id(event, now_ms, out)

    def tick(self, now_ms: float, out: Output) -> None:
        """Seal what has waited long enough."""
        opened = self.open
        if opened is not None and opened.events:
            if self.policy:
                if self.limits.policy_ms is not None and (
                    now_ms - opened.started_ms >= self.limits.policy_ms
                ):
                    self._seal(out)
            elif now_ms - opened.touched_ms >= self.limits.seal_after_ms:
                self._seal(out)
        if self.resend is not None and now_ms - self.resend.touched_ms >= self.limits.seal_after_ms:
            self._settle_resend(out)

    # -- gate ----------------------------------------------------------------------------

    def release(self, out: Output, gate: int | None = None, gated: bool = False) -> None:
        """Emit queued batches. Gated, a batch waits until the last one emitted is committed
        downstream (`gate` is the highest batch id the app has committed on this lane)."""
        while self.queued:
            last = self.state.last
            if gated and last is not None and (gate is None or gate < last):
                return
            batch = self.queued.popleft()
            self.state.last = batch.batch_id
            self.state.recent[batch.batch_id] = batch.digest
            while len(self.state.recent) > RECENT_DIGESTS:
                self.state.recent.popitem(last=False)
            self.state.mark(batch.events)
            out.sealed.append(batch)

    def unreleased(self) -> int | None:
        """The lowest batch id this lane holds and has not emitted (open, queued or a
        re-send being settled), if any."""
        ids: list[int | None] = [b.batch_id for b in self.queued]
        ids += [o.batch_id for o in (self.open, self.resend) if o is not None and o.events]
        known = [b for b in ids if b is not None]
        return min(known) if known else None

    def pending_floor(self) -> dict[tuple[str, int], int]:
        """Per input partition, the lowest offset held here and not yet emitted."""
        floor: dict[tuple[str, int], int] = {}
        held = [b.events for b in self.queued]
        held += [o.events for o in (self.open, self.resend) if o is not None]
        for events in held:
            for e in events:
                topic, part, offset = e.position
                key = (topic, part)
                floor[key] = min(floor.get(key, offset), offset)
        return floor

    # -- rules ---------------------------------------------------------------------------

    @property
    def _last_sealed(self) -> int | None:
        return self.queued[-1].batch_id if self.queued else self.state.last

    def _add_with_id(self, event: Event, now_ms: float, out: Output) -> None:
        b = event.batch_id
        assert b is not None
        opened = self.open
        if self.poisoned == b:
            self._dead(
                out, Reason.OVERSIZED, f"batch {b} of {self.name} is over the limit", [event]
            )
            return
        if opened is not None and b == opened.batch_id:
            self._append(opened, event, now_ms, out)
            return
        last = self._last_sealed
        if last is not None and b <= last:
            if self.resend is not None and self.resend.batch_id != b:
                self._settle_resend(out)
            if self.resend is None:
                self.resend = _Open(b)
            self.resend.add(event, now_ms)
            return
        if self.resend is not None:
            self._settle_resend(out)
        if opened is not None and opened.batch_id is not None and b < opened.batch_id:
            error = f"batch {b} of {self.name} arrived after batch {opened.batch_id} had begun"
            self._dead(out, Reason.OUT_OF_ORDER, error, [event])
            return
        if opened is not None:
            self._seal(out)
        self.open = _Open(b)
        self._append(self.open, event, now_ms, out)

    def _append(self, opened: _Open, event: Event, now_ms: float, out: Output) -> None:
        if (
            len(opened.events) + 1 > self.limits.max_events
            or opened.size + event.size > self.limits.max_bytes
        ):
            error = (
                f"batch {opened.batch_id} of {self.name} exceeds {self.limits.max_events} events"
                f" or {self.limits.max_bytes} bytes"
            )
            self._dead(out, Reason.OVERSIZED, error, [*opened.events, event])
            self.poisoned = opened.batch_id
            self.open = None
            return
        opened.add(event, now_ms)

    def _add_policy(self, event: Event, now_ms: float, out: Output) -> None:
        if event.size > self.limits.max_bytes:
            self._seal(out)  # keep the cut in input order
            error = f"one event of {event.size} bytes exceeds {self.limits.max_bytes} bytes"
            self._dead(out, Reason.OVERSIZED, error, [event])
            return
        opened = self.open
        if opened is not None and opened.size + event.size > self.limits.max_bytes:
            self._seal(out)
        if self.open is None:
            self.open = _Open(None)
        self.open.add(event, now_ms)
        count = self.limits.policy_events or self.limits.max_events
        if len(self.open.events) >= min(count, self.limits.max_events):
            self._seal(out)

    def _seal(self, out: Output) -> None:
        opened, self.open = self.open, None
        if opened is None or not opened.events:
            return
        batch_id = opened.batch_id
        if batch_id is None:  # policy mode numbers its own batches
            batch_id = (self._last_sealed or 0) + 1
        self.queued.append(Sealed(batch_id, opened.events, digest(opened.events)))

    def _settle_resend(self, out: Output) -> None:
        """A re-sent id: dropped if it is exactly a batch sealed before, else dead-lettered."""
        resend, self.resend = self.resend, None
        if resend is None or resend.batch_id is None:
            return
        batch = Sealed(resend.batch_id, resend.events, digest(resend.events))
        known = self.state.recent.get(batch.batch_id)
        known = next((q.digest for q in self.queued if q.batch_id == batch.batch_id), known)
        if known == batch.digest:
            self.state.mark(batch.events)
            out.duplicates.append(batch)
            return
        error = (
            f"batch {batch.batch_id} of {self.name} is not above the last sealed batch"
            f" {self._last_sealed} and is not an exact re-send of it"
        )
        self._dead(out, Reason.LATE, error, resend.events)

    def _dead(self, out: Output, reason: Reason, error: str, events: list[Event]) -> None:
        self.state.mark(events)
        out.dead.extend(DeadLetter(reason, error, e) for e in events)
