"""`txstream leaderboard run` agrees exactly with the independent serial reference."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv
from tests.support.reference.leaderboard_ref import run_reference
from tests.support.scale import cases
from txstream.config import project_root

pytestmark = pytest.mark.faults

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")

ALL_CASES = [
    # seed, votes, contestants, threshold, window, slide, batch size, through the sequencer
    (1, 4000, 12, 1000, 100, 1, 1, False),
    (2, 6000, 12, 1000, 100, 10, 10, False),
    (3, 30000, 50, 5000, 100, 10, 1, False),
    (4, 4000, 12, 1000, 100, 1, 1, True),  # plain JSON events, sealed by the sequencer
    (5, 6000, 12, 1000, 100, 10, 10, True),
]
# `make test` runs one case each way in (batches of 10 straight in, single votes through the
# sequencer); `make faults` runs all five, the 30,000-vote one among them.
CASES = cases([ALL_CASES[1], ALL_CASES[3]], ALL_CASES)


@pytest.mark.parametrize(("seed", "count", "n", "t", "w", "s", "k", "via_sequencer"), CASES)
def test_cli_agrees_with_reference(
    kafka: KafkaEnv,
    tmp_path: Path,
    seed: int,
    count: int,
    n: int,
    t: int,
    w: int,
    s: int,
    k: int,
    via_sequencer: bool,
) -> None:
    votes, result = tmp_path / "votes.txt", tmp_path / "result.json"
    write_votes_file(votes, count, contestants=n, seed=seed)
    env = {
        **os.environ,
        "TXSTREAM_HOME": str(tmp_path / "home"),
        "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap,
    }
    args = ["--contestants", n, "--threshold", t, "--window", w, "--slide", s, "--batch-size", k]
    if via_sequencer:
        args.append("--via-sequencer")
    run = subprocess.run(
        [TXSTREAM, "leaderboard", "run", "--votes", str(votes), "--result", str(result),
         *map(str, args)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "batches/s" in run.stdout
    got = json.loads(result.read_text())
    expected = run_reference(votes, contestants=n, threshold=t, window=w, slide=s, batch_size=k)
    assert {key: got[key] for key in expected} == expected
    assert expected["removed"], "the case must exercise removals"


def test_malformed_votes_file_names_the_line_and_loads_nothing(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    votes = tmp_path / "votes.txt"
    votes.write_text("1 2025550100 3\n2 2025550101 x\n")
    env = {
        **os.environ,
        "TXSTREAM_HOME": str(tmp_path / "home"),
        "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap,
    }
    run = subprocess.run(
        [TXSTREAM, "leaderboard", "run", "--votes", str(votes), "--result", str(tmp_path / "r")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 2
    assert f"{votes}:2" in run.stderr
    assert not (tmp_path / "home" / "run").exists(), "nothing was started"
    assert not (tmp_path / "r").exists()
