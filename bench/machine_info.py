"""The machine a benchmark ran on, for the figures recorded in docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
from datetime import date
from pathlib import Path
from typing import Any

from txstream import native
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin

# A column of a markdown table: its heading, the row's key, and how to show the value: a
# format spec (right-aligned, as numbers are), "s" (text, left-aligned) or "yes" (a flag).
Column = tuple[str, str, str]


def ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except (OSError, ValueError, IndexError):
        pass
    return None


# A shared broker holding this many topics or more is crowded: one left with 4,305 topics by
# earlier runs ran a ZGC cycle every 1-4 s under load instead of every 20-40 s, and the
# Leaderboard's p99 at 1,700 batches/s was 78-199 ms against 41-64 once they were deleted
# (docs/performance-history.md, "The broker's leftover topics", 2026-11-29). Figures from a crowded
# broker are not comparable.
CROWDED_TOPICS = 500


def machine(settings: Settings | None = None) -> dict[str, Any]:
    """The machine; with `settings`, also the topics and partitions its broker holds now,
    so call it before the run creates its own."""
    ram = ram_gib()
    m: dict[str, Any] = {
        "node": platform.node(),
        "cores": os.cpu_count(),
        "ram_gib": None if ram is None else round(ram, 1),
        "python": platform.python_version(),
        "hot_path": native.status(),  # the worker's, which inherits this environment
    }
    if settings is not None:
        counts = TopicAdmin(settings).partition_counts()
        m["broker_topics"], m["broker_partitions"] = len(counts), sum(counts.values())
    return m


def machine_text(m: dict[str, Any]) -> str:
    ram = "? GiB" if m["ram_gib"] is None else f"{m['ram_gib']:.1f} GiB"
    hot = f", hot path {m['hot_path']}" if "hot_path" in m else ""
    broker = ""
    if "broker_topics" in m:
        broker = (f", the broker holding {m['broker_topics']:,} topics "
                  f"({m['broker_partitions']:,} partitions) at the start")  # fmt: skip
    return f"{m['cores']} cores, {ram} RAM, Python {m['python']}{hot}{broker}"


def crowded_warning(m: dict[str, Any]) -> str | None:
    """A warning when the broker was crowded at the start (CROWDED_TOPICS), else None."""
    topics = m.get("broker_topics", 0)
    if topics < CROWDED_TOPICS:
        return None
    return (f"the broker holds {topics:,} topics, most likely left by earlier runs: its "
            "garbage collection then slows every request, and these figures are not "
            "comparable with a clean broker's (delete the stale ones with `txstream topics "
            "delete --prefix ...`)")  # fmt: skip


def write_report(
    script: str, rows: list[dict[str, Any]], out: Path, **extra: Any
) -> dict[str, Any]:
    """The run's JSON document (date, machine, the command as typed, its rows) written to
    `out`, with the line that heads its table in docs/benchmarks.md printed."""
    m = machine()
    doc = {
        "date": date.today().isoformat(),
        "machine": m,
        "command": " ".join([f".venv/bin/python {script}", *map(shlex.quote, sys.argv[1:])]),
        "rows": rows,
        **extra,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str))
    print(f"\n{doc['date']}, {machine_text(m)}; `{doc['command']}`\n")
    return doc


def percentile(values: list[float], q: int) -> float:
    """The q-th percentile (inclusive method); the value itself for fewer than two."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def markdown(rows: list[dict[str, Any]], columns: list[Column]) -> str:
    """The rows as the markdown table docs/benchmarks.md records them in."""

    def cell(value: Any, fmt: str) -> str:
        if fmt == "yes":
            return "yes" if value else "NO"
        return format(value, fmt)

    lines = [
        "| " + " | ".join(heading for heading, _, _ in columns) + " |",
        "|" + "|".join("---" if fmt in ("s", "yes") else "---:" for _, _, fmt in columns) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(cell(r[key], fmt) for _, key, fmt in columns) + " |")
    return "\n".join(lines)
