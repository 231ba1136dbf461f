"""Figure 8's results, plots and markdown tables, for `recovery_bench.py`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machine_info import machine_text
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from txstream.model.declarations import RecoveryMode

MODES = [RecoveryMode.CHANGELOG, RecoveryMode.STRONG, RecoveryMode.WEAK]
COLORS = {
    RecoveryMode.CHANGELOG: "tab:blue",
    RecoveryMode.STRONG: "tab:red",
    RecoveryMode.WEAK: "tab:green",
}
MARKERS = {RecoveryMode.CHANGELOG: "o", RecoveryMode.STRONG: "s", RecoveryMode.WEAK: "^"}


@dataclass(frozen=True)
class Throughput:
    mode: str
    group_commit: bool
    length: int
    batches: int
    commits: int
    seconds: float  # from task.open() until the last batch is committed
    batches_per_s: float  # batches / seconds: the figure
    open_s: float  # of seconds, in task.open(): fencing and restoring the empty state
    after_open_batches_per_s: float  # batches / (seconds - open_s), for reference


@dataclass(frozen=True)
class Recovery:
    mode: str
    length: int
    batches: int
    process_s: float
    recovered_s: float
    recovered_records: int
    state_entries: int


def plot_throughput(results: Sequence[Throughput], path: Path) -> None:
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for gc in (True, False):
        for mode in MODES:
            rows = sorted(
                (r for r in results if r.mode == mode and r.group_commit == gc),
                key=lambda r: r.length,
            )
            if not rows:
                continue
            ax.plot(
                [r.length for r in rows],
                [r.batches_per_s for r in rows],
                color=COLORS[mode],
                linestyle="-" if gc else "--",
                marker=MARKERS[mode],
                markerfacecolor=COLORS[mode] if gc else "white",
                label=f"{mode}, group commit {'on' if gc else 'off'}",
            )
    lengths = sorted({r.length for r in results})
    ax.set_xticks(lengths)
    # Group commit off is an order of magnitude slower: a log scale keeps both readable,
    # with plain-number ticks at 1, 2 and 5 of each decade.
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:,.0f}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("chain length (procedures fused by PE triggers)")
    ax.set_ylabel("throughput (batches/s, log scale)")
    ax.set_title("Fig. 8a: throughput by recovery mode, 1 tuple per batch")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.savefig(path, dpi=150)


def plot_recovery(results: Sequence[Recovery], path: Path) -> None:
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    counts = sorted({r.batches for r in results})
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        by_n = {r.batches: r for r in results if r.mode == mode}
        xs = [j + (i - (len(MODES) - 1) / 2) * width for j, n in enumerate(counts) if n in by_n]
        ys = [by_n[n].recovered_s for n in counts if n in by_n]
        bars = ax.bar(xs, ys, width, color=COLORS[mode], label=str(mode))
        ax.bar_label(bars, labels=[f"{y:.2f}s" for y in ys], fontsize="small", padding=2)
    ax.set_xticks(range(len(counts)), [f"N = {n:,}" for n in counts])
    length = results[0].length if results else 0
    ax.set_xlabel(f"batches since the last snapshot (chain length {length})")
    ax.set_ylabel("recovery time (s)")
    ax.set_title("Fig. 8b: recovery time by recovery mode")
    ax.margins(y=0.12)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=150)


def tables(
    throughput: Sequence[Throughput], recovery: Sequence[Recovery], meta: dict[str, Any]
) -> str:
    out = [
        f"Date: {meta['date']}  ",
        f"Command: `{meta['command']}`  ",
        f"Machine: {machine_text(meta['machine'])}",
        "",
    ]
    cols = [(m, gc) for gc in (True, False) for m in MODES]
    head = [f"{m} GC {'on' if gc else 'off'}" for m, gc in cols]
    out += [
        "Fig. 8a, throughput (batches/s, 1 tuple per batch; "
        f"GC on: {meta['batches']:,} batches, GC off: {meta['batches_off']:,})",
        "",
        "| chain length | " + " | ".join(head) + " |",
        "|---:|" + "---:|" * len(cols),
    ]
    cell = {(r.mode, r.group_commit, r.length): r.batches_per_s for r in throughput}
    for n in sorted({r.length for r in throughput}):
        vals = [cell.get((str(m), gc, n)) for m, gc in cols]
        out.append(f"| {n} | " + " | ".join("" if v is None else f"{v:,.0f}" for v in vals) + " |")
    if throughput:
        opens = [r.open_s for r in throughput]
        out += [
            "",
            f"Each rate includes `task.open()` (fencing, restoring the empty state): "
            f"{min(opens):.2f}-{max(opens):.2f} s per run; the JSON also has the rate after it.",
        ]
    counts = sorted({r.batches for r in recovery})
    out += [
        "",
        f"Fig. 8b, recovery after N batches since the last snapshot (chain length "
        f"{meta['recovery_length']}; seconds, and in brackets the log records replayed)",
        "",
        "| mode | " + " | ".join(f"N = {n:,}" for n in counts) + " |",
        "|---|" + "---:|" * len(counts),
    ]
    rec = {(r.mode, r.batches): r for r in recovery}
    for m in MODES:
        row = [rec.get((str(m), n)) for n in counts]
        out.append(
            f"| {m} | "
            + " | ".join(
                "" if r is None else f"{r.recovered_s:.2f} s ({r.recovered_records:,})" for r in row
            )
            + " |"
        )
    return "\n".join(out)
