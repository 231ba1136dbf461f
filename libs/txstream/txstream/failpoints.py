"""Named points where a fault test makes a real process crash, freeze, or lose a message.

`TXSTREAM_FAILPOINTS="coordinator.after_decision=kill,coordinator.drop_prepare=drop@3"`
arms two points: the first hit of `coordinator.after_decision` SIGKILLs the process, the
third hit of `coordinator.drop_prepare` drops that message. `stop` SIGSTOPs the process at
the point, so a test can wake it there (SIGCONT) as a zombie, after others took its place.
Each point fires once. Unset, every check is a dictionary miss.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_armed: dict[str, tuple[str, int]] = {}
_hits: Counter[str] = Counter()


def arm(spec: str) -> None:
    """Parse a spec like the environment variable's; raises naming a malformed entry."""
    _armed.clear()
    _hits.clear()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, action = item.partition("=")
        what, _, nth = action.partition("@")
        if what not in ("kill", "stop", "drop") or (nth and not nth.isdigit()):
            raise ValueError(f"failpoint {item!r} must be name=kill|stop|drop[@n]")
        _armed[name] = (what, int(nth or 1))


def hit(name: str) -> bool:
    """Count a pass through `name`; True if a message here is to be dropped."""
    armed = _armed.get(name)
    if armed is None:
        return False
    _hits[name] += 1
    action, nth = armed
    if _hits[name] != nth:
        return False
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)  # returns once woken
        return False
    return True


arm(os.environ.get("TXSTREAM_FAILPOINTS", ""))
