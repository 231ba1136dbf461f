"""The sequencer's Prometheus metrics; nothing it drops goes uncounted."""

from __future__ import annotations

from prometheus_client import Counter

EVENTS = Counter("txstream_sequencer_events_total", "Input records read", ["stream"])
SEALED = Counter("txstream_sequencer_batches_sealed_total", "Batches written", ["stream"])
DUPLICATES = Counter(
    "txstream_sequencer_duplicates_total", "Exact re-sends of sealed batches dropped", ["stream"]
)
DEAD_LETTERS = Counter(
    "txstream_sequencer_dead_letters_total", "Records sent to the dead-letter topic",
    ["stream", "reason"],
)  # fmt: skip
