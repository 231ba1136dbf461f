"""`make report`: the tables of docs/benchmarks.md printed from the benchmarks' JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import report

ROOT = Path(__file__).resolve().parents[3]


def bank_doc() -> dict[str, object]:
    return {
        "command": "bench/bank_bench.py --accounts 20000",
        "date": "2026-12-07",
        "machine": {"cores": 2, "ram_gib": 23.5, "python": "3.11.7", "hot_path": "compiled"},
        "config": {"accounts": 20000},
        "rows": [
            {"mix": "single", "transfers_per_s": 3070.4, "single_per_s": 3070.4,
             "multi_per_s": 0, "abort_rate": 0.181, "conserved": True},
            {"mix": "multi", "transfers_per_s": 1048.0, "single_per_s": 0,
             "multi_per_s": 1048.0, "abort_rate": 0.188, "conserved": False},
        ],
    }  # fmt: skip


def test_a_bank_run_becomes_its_table_row_by_row() -> None:
    lines = report.bank(bank_doc()).splitlines()
    rows = [line for line in lines if line.startswith("| ") and "accounts |" in line]
    assert len(rows) == 2
    assert (
        "| single-partition pairs, 20,000 accounts | 3,070 | 3,070 | 0 | 18.1% | yes |" in rows[0]
    )
    assert "| 1,048 | 0 | 1,048 | 18.8% | NO |" in rows[1], "money not conserved says so"
    assert rows[0].endswith("| 2026-12-07 | 2 cores, 23.5 GiB, Python 3.11.7, hot path compiled |")


def test_make_report_prints_a_table_for_each_json_there_is(tmp_path: Path) -> None:
    (tmp_path / "bank_bench.json").write_text(json.dumps(bank_doc()))
    out = subprocess.run([sys.executable, "-m", "bench.report", "--figures", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.startswith("Bank transfers (bank_bench.json):")
    assert "Leaderboard" not in out, "no JSON, no table"
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(subprocess.CalledProcessError) as e:
        subprocess.run([sys.executable, "-m", "bench.report", "--figures", str(empty)],
                       cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
    assert "no benchmark JSON in" in e.value.stderr
