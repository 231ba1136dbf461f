"""The Leaderboard's acceptance command with its records as Python types against the same
command with `.avsc` names: both ways, alternating, pairs minutes apart at most.

    .venv/bin/python bench/typed_records_bench.py --votes 20000 --pairs 3

Each run is `txstream leaderboard run --preload` (with `--typed-records` for the typed
form) on one votes file; the result documents must be equal. The figure is its batches/s;
the ratio typed / avsc per pair, and the median, go to docs/figures/typed_records.json.
Each run's topics are deleted after it: a broker left holding a few thousand topics of
earlier runs ran the Leaderboard about a fifth slower, and less evenly.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.leaderboard_peers.topics import delete_topics_with  # noqa: E402
from bench.machine_info import write_report  # noqa: E402
from leaderboard.votegen import write_votes_file  # noqa: E402
from txstream.config import Settings  # noqa: E402

TXSTREAM = str(ROOT / ".venv" / "bin" / "txstream")
RATE = re.compile(r"(\d+) batches in ([\d.]+)s = ([\d,]+) batches/s")


def run(votes: Path, result: Path, typed: bool) -> float:
    """One run's batches/s; its topics are gone afterwards."""
    try:
        return _run(votes, result, typed)
    finally:
        if result.exists():
            app = json.loads(result.read_text()).get("app")
            if app:
                delete_topics_with(Settings(), [f"{app}."])


def _run(votes: Path, result: Path, typed: bool) -> float:
    form = ["--typed-records"] if typed else []
    argv = [TXSTREAM, "leaderboard", "run", "--votes", str(votes), "--result", str(result),
            "--threshold", "5000", "--preload", *form]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    found = RATE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return float(found.group(3).replace(",", ""))


def document(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    doc.pop("app", None)
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--votes", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        votes = Path(tmp) / "votes.txt"
        write_votes_file(votes, args.votes, contestants=50, seed=7)
        for pair in range(args.pairs):
            order = [False, True] if pair % 2 == 0 else [True, False]
            rates = {}
            for typed in order:
                result = Path(tmp) / f"result-{pair}-{typed}.json"
                rates[typed] = run(votes, result, typed)
                print(f"pair {pair + 1}: {'typed' if typed else 'avsc'} {rates[typed]:,.0f} "
                      "batches/s", flush=True)  # fmt: skip
            same = document(Path(tmp) / f"result-{pair}-True.json") == document(
                Path(tmp) / f"result-{pair}-False.json"
            )
            if not same:
                raise SystemExit(f"pair {pair + 1}: the two forms' results differ")
            rows.append({"pair": pair + 1, "first": "typed" if order[0] else "avsc",
                         "avsc": rates[False], "typed": rates[True],
                         "ratio": rates[True] / rates[False]})  # fmt: skip
    ratios = [r["ratio"] for r in rows]
    write_report("bench/typed_records_bench.py", rows, ROOT / "docs/figures/typed_records.json",
                 median_ratio=statistics.median(ratios))  # fmt: skip
    for r in rows:
        print(f"pair {r['pair']} ({r['first']} first): avsc {r['avsc']:,.0f}, typed "
              f"{r['typed']:,.0f} batches/s, typed/avsc {r['ratio']:.2f}")  # fmt: skip
    print(f"median typed/avsc: {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
