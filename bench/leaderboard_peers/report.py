"""The comparison as a markdown table, a JSON document and a bar chart (docs/figures)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from bench.leaderboard_peers.check import Measured

# S-Store VLDB'15, Table 1: batches/s on the leaderboard, 1 tuple per batch (published).
PUBLISHED = {
    "S-Store, all guarantees": 2200,
    "H-Store async, no order": 5300,
    "Storm + VoltDB": 600,
    "Esper + VoltDB": 570,
    "H-Store sync": 210,
}
BASELINE = "txstream"


def baseline(results: Sequence[Measured]) -> Measured | None:
    """txstream with all guarantees: the run every ratio is taken against."""
    return next((r for r in results if r.system.startswith(BASELINE) and r.correct), None)


def ratio_text(r: Measured, base: Measured | None) -> str:
    if r.error is not None or base is None or base.rate <= 0:
        return ""
    return f"{r.rate / base.rate:.2f}x"


def result_text(r: Measured) -> str:
    if r.error is not None:
        return f"**failed**: {r.error.splitlines()[0][:120]}"
    if r.correct:
        return "correct"
    keys = ", ".join(d.split(":")[0] for d in r.differences)
    return f"**INCORRECT** (differs in {keys}; details in the JSON)"


def markdown(results: Sequence[Measured], meta: dict[str, Any]) -> str:
    base = baseline(results)
    out = [
        f"Date: {meta['date']}. Machine: {meta['machine_text']}. Command: `{meta['command']}`.",
        f"CPUs: {meta.get('cpus', 'not recorded')}.",
        f"Votes: {meta['votes']:,} ({meta['params']}), the same file for every system; "
        "reference: `tests/support/reference/leaderboard_ref.py`.",
        "",
        "| system | batches/s | ratio to txstream | result | guarantees | clock |",
        "|---|---:|---:|---|---|---|",
    ]
    for r in results:
        rate = "" if r.error is not None else f"{r.rate:,.0f}"
        out.append(
            f"| {r.system} | {rate} | {ratio_text(r, base)} | {result_text(r)} "
            f"| {r.guarantees} | {r.timing} |"
        )
    return "\n".join(out)


def document(results: Sequence[Measured], meta: dict[str, Any]) -> dict[str, Any]:
    base = baseline(results)
    return {
        **meta,
        "published_sstore_table1": PUBLISHED,
        "systems": [
            {
                **asdict(r),
                "rate": r.rate,
                "correct": r.correct,
                "ratio_to_txstream": None if base is None or r.error else r.rate / base.rate,
            }
            for r in results
        ],
    }


def plot(results: Sequence[Measured], meta: dict[str, Any], path: Path) -> None:
    """Measured systems beside S-Store's published Table 1 (grey: not measured here)."""
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2, sharey=True, width_ratios=[len(results) or 1, len(PUBLISHED)])
    ok = [r for r in results if r.error is None]
    bars = ax1.bar(
        range(len(ok)),
        [r.rate for r in ok],
        color=["tab:green" if r.correct else "tab:red" for r in ok],
        hatch=[None if r.correct else "//" for r in ok],
    )
    ax1.bar_label(
        bars,
        labels=[f"{r.rate:,.0f}" + ("" if r.correct else "\nincorrect") for r in ok],
        fontsize="small",
    )
    ax1.set_xticks(
        range(len(ok)), [_short(r.system) for r in ok], rotation=20, ha="right", fontsize="small"
    )
    ax1.set_ylabel("batches/s (1 vote per batch)")
    ax1.set_title(f"measured here, {meta['date']}, {meta['votes']:,} votes", fontsize="medium")
    pub = ax2.bar(range(len(PUBLISHED)), list(PUBLISHED.values()), color="tab:gray")
    ax2.bar_label(pub, labels=[f"{v:,}" for v in PUBLISHED.values()], fontsize="small")
    ax2.set_xticks(
        range(len(PUBLISHED)), list(PUBLISHED), rotation=20, ha="right", fontsize="small"
    )
    ax2.set_title("S-Store VLDB'15 Table 1 (published)", fontsize="medium")
    for ax in (ax1, ax2):
        ax.grid(True, axis="y", alpha=0.3)
        ax.margins(y=0.15)
    fig.suptitle("Leaderboard: txstream and its peers on the same votes")
    fig.savefig(path, dpi=150)


def _short(system: str) -> str:
    return system.split(" (")[0]
