"""Keep Python's full garbage collections off the hot path.

A service starts with some 100,000-160,000 long-lived objects (modules, Faust, the app's
declarations), and every full collection walked them all: 50-80 ms pauses, several a
minute under load, each stalling every batch in flight. Frozen, they are never walked again;
full collections then took under 5 ms in the same runs.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Collect once, then move every surviving object out of the collector's sight.
    Returns how many were frozen. Call once, when start-up is done."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
