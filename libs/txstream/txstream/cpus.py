"""CPU sets: which CPUs a process may run on, in Linux's list syntax ("0", "1-3", "0,2-3").

On one machine, a broker and a worker that share every CPU preempt each other: the kernel
runs the broker's request threads on the core the worker's task thread was using, and the
batches in hand wait. Kept on CPUs of their own (settings `kafka_cpus`, `worker_cpus`), they
stand as they would on separate machines; the Leaderboard's p99 at 3,000 batches/s fell from
108-397 ms to 43-61 (docs/performance-history.md, 2026-11-28).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable


class CpuSetError(ValueError):
    """A CPU list that does not parse, or names CPUs this process may not use."""


def parse_cpus(text: str, setting: str) -> frozenset[int]:
    """The CPUs `text` lists; empty for "" (no restriction). `setting` names it in errors."""
    if not text.strip():
        return frozenset()
    cpus: set[int] = set()
    for item in text.replace(" ", "").split(","):
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise CpuSetError(
                f"{setting} {text!r}: {item!r} is not a CPU number or range (e.g. 0, 1-3, 0,2)"
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise CpuSetError(f"{setting} {text!r}: the range {item!r} runs backwards")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def cpu_text(cpus: frozenset[int]) -> str:
    """`cpus` as a list of ranges: {0, 1, 2, 5} -> "0-2,5"."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and spans[-1][1] == cpu - 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def checked(cpus: frozenset[int], setting: str) -> frozenset[int]:
    """`cpus` if this process may run on every one of them; else an error naming the rest."""
    allowed = frozenset(os.sched_getaffinity(0))
    missing = cpus - allowed
    if missing:
        raise CpuSetError(
            f"{setting}: CPU {cpu_text(frozenset(missing))} is not available here "
            f"(this process may use {cpu_text(allowed)})"
        )
    return cpus


def pin_self(cpus: frozenset[int], setting: str) -> None:
    """Keep this process to `cpus` (if any): each of its threads now, since some start as
    their modules are imported, and so every thread started later, which inherits its
    starter's set."""
    if not cpus:
        return
    wanted = checked(cpus, setting)
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # the thread ended meanwhile
            os.sched_setaffinity(int(task), wanted)


def pinning(cpus: frozenset[int], setting: str) -> Callable[[], None] | None:
    """A `preexec_fn` that keeps a child and all its threads to `cpus`; None for no set.
    Checked here, in the parent, so a bad set fails with its error, not in the child."""
    if not cpus:
        return None
    wanted = checked(cpus, setting)
    return lambda: os.sched_setaffinity(0, wanted)
