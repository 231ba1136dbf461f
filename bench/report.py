"""The tables of docs/benchmarks.md that the benchmarks' JSON holds, printed as markdown.

`make report` (`.venv/bin/python -m bench.report`) reads the JSON files the benchmarks write
into docs/figures and prints a table for each one that exists:

- leaderboard_peers.json (`bench.leaderboard_peers`): txstream against each peer that ran;
- trigger_chains.json (`bench/trigger_chains_bench.py`): S-Store's Figures 6 and 7;
- recovery_bench.json (`bench/recovery_bench.py`): S-Store's Figure 8, the shortest and
  longest chains and every recovery size;
- bank_bench.json (`bench/bank_bench.py`): transfers/s by mix.

Each row carries the command, date and machine of the run it comes from, so a table pasted
into docs/benchmarks.md says where its figures came from. Figures that no benchmark writes
into docs/figures are kept in docs/benchmarks.md by hand. Nothing here runs a benchmark.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.machine_info import Column, markdown

ROOT = Path(__file__).resolve().parent.parent
MIXES = {
    "single": "single-partition pairs",
    "multi": "multi-partition pairs (2PC)",
    "uniform": "uniform pairs (TSpoon)",
}


def machine_cell(m: dict[str, Any] | str) -> str:
    """The machine, short enough for a table cell."""
    if isinstance(m, str):
        return m
    text = f"{m['cores']} cores, {m['ram_gib']} GiB, Python {m['python']}"
    if str(m.get("hot_path", "")).startswith("compiled"):
        text += ", hot path compiled"
    return text


def run_cells(doc: dict[str, Any]) -> dict[str, str]:
    return {
        "command": f"`{doc['command']}`",
        "date": doc["date"],
        "machine": machine_cell(doc["machine"]),
    }


RUN: list[Column] = [
    ("command", "command", "s"),
    ("date", "date", "s"),
    ("machine", "machine", "s"),
]


def leaderboard(doc: dict[str, Any]) -> str:
    systems = doc["systems"]
    ours = next(s for s in systems if s["system"].startswith("txstream, all guarantees"))
    rows = []
    for peer in systems:
        if peer is ours:
            continue
        name = peer["system"] + ("" if peer["correct"] else " (result INCORRECT)")
        rows.append(
            {
                "workload": f"Leaderboard, {doc['votes']:,} votes, 1 vote per batch",
                "ours": ours["rate"],
                "peer": name,
                "theirs": peer["rate"],
                "ratio": f"{ours['rate'] / peer['rate']:.2f}x",
                **run_cells(doc),
            }
        )
    columns: list[Column] = [
        ("workload", "workload", "s"),
        ("txstream batches/s", "ours", ",.0f"),
        ("peer, same run", "peer", "s"),
        ("peer batches/s", "theirs", ",.0f"),
        ("txstream / peer", "ratio", "s"),
        *RUN,
    ]
    return markdown(rows, columns)


def trigger_chains(doc: dict[str, Any]) -> str:
    points = doc["points"]
    rows = []
    for p in points:
        if "triggers" not in p["system"]:
            continue
        peer = next(
            q
            for q in points
            if q is not p and (q["figure"], q["length"]) == (p["figure"], p["length"])
        )
        rows.append(
            {
                "workload": f"Fig. {p['figure']}, chain of {p['length']}",
                "ours": p["batches_per_s"],
                "peer": peer["system"],
                "theirs": peer["batches_per_s"],
                "ratio": f"{p['batches_per_s'] / peer['batches_per_s']:.2f}x",
                **run_cells(doc),
            }
        )
    rows.sort(key=lambda r: (r["workload"].split(",")[0], int(r["workload"].rsplit(" ", 1)[1])))
    columns: list[Column] = [
        ("workload", "workload", "s"),
        ("txstream (triggers) batches/s", "ours", ",.0f"),
        ("peer, same run", "peer", "s"),
        ("peer batches/s", "theirs", ",.0f"),
        ("txstream / peer", "ratio", "s"),
        *RUN,
    ]
    return markdown(rows, columns)


def recovery(doc: dict[str, Any]) -> str:
    lengths = sorted({p["length"] for p in doc["throughput"]})
    rows = []
    for gc in (True, False):
        for length in (lengths[0], lengths[-1]):
            by_mode = {
                p["mode"]: p["batches_per_s"]
                for p in doc["throughput"]
                if p["length"] == length and p["group_commit"] is gc
            }
            workload = (
                f"Fig. 8a, chain of {length}, group commit {'on' if gc else 'off'}, batches/s"
            )
            cells = {m: f"{v:,.0f}" for m, v in by_mode.items()}
            rows.append({"workload": workload, **cells, **run_cells(doc)})
    for n in sorted({p["batches"] for p in doc["recovery"]}):
        by_mode = {p["mode"]: p for p in doc["recovery"] if p["batches"] == n}
        rows.append(
            {
                "workload": f"Fig. 8b, recovery after {n:,} batches (chain of "
                f"{doc['recovery_length']}), s (log records replayed)",
                **{
                    m: f"{p['recovered_s']:.2f} ({p['recovered_records']:,})"
                    for m, p in by_mode.items()
                },
                **run_cells(doc),
            }
        )
    columns: list[Column] = [
        ("workload", "workload", "s"),
        ("changelog", "changelog", ">"),
        ("strong", "strong", ">"),
        ("weak", "weak", ">"),
        *RUN,
    ]
    return markdown(rows, columns)


def bank(doc: dict[str, Any]) -> str:
    config = doc["config"]
    rows = [
        {
            "workload": f"{MIXES.get(r['mix'], r['mix'])}, {config['accounts']:,} accounts",
            "rate": r["transfers_per_s"],
            "single": r["single_per_s"],
            "multi": r["multi_per_s"],
            "aborts": f"{r['abort_rate']:.1%}",
            "conserved": r["conserved"],
            **run_cells(doc),
        }
        for r in doc["rows"]
    ]
    columns: list[Column] = [
        ("workload", "workload", "s"),
        ("transfers/s", "rate", ",.0f"),
        ("single-partition/s", "single", ",.0f"),
        ("multi-partition/s", "multi", ",.0f"),
        ("abort rate", "aborts", ">"),
        ("money conserved", "conserved", "yes"),
        *RUN,
    ]
    return markdown(rows, columns)


TABLES: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
    ("leaderboard_peers.json", "Leaderboard against its peers", leaderboard),
    ("trigger_chains.json", "Trigger chains (S-Store Figures 6 and 7)", trigger_chains),
    ("recovery_bench.json", "Recovery (S-Store Figure 8)", recovery),
    ("bank_bench.json", "Bank transfers", bank),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--figures",
        type=Path,
        default=ROOT / "docs/figures",
        help="the folder holding the benchmarks' JSON",
    )
    args = parser.parse_args()
    printed = 0
    for name, title, table in TABLES:
        path = args.figures / name
        if not path.exists():
            continue
        print(f"{title} ({path.name}):\n\n{table(json.loads(path.read_text()))}\n")
        printed += 1
    if not printed:
        raise SystemExit(f"no benchmark JSON in {args.figures}")


if __name__ == "__main__":
    main()
