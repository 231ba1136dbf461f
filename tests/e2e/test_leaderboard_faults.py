"""`txstream leaderboard run` end to end, with its worker SIGKILLed at random moments.

The result must equal the serial reference, and reading every output, notice and changelog
topic with read_committed must show each batch exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from leaderboard.votegen import write_votes_file
from tests.conftest import KafkaEnv
from tests.kafka_reads import read_to_end
from tests.killer import Killer
from tests.reference.leaderboard_ref import run_reference
from txstream.commit.state_codec import SYS_SCHEMA
from txstream.config import Settings, project_root
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.process import cmdline, is_alive
from txstream.state.keys import encode_key

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")
SMALL = ["--contestants", "12", "--threshold", "1000", "--window", "100", "--slide", "1"]


def read_all(settings: Settings, topic: str) -> list[bytes]:
    return [value for _, value in read_to_end(settings, topic)]


@pytest.mark.timeout(600)
def test_sigkilled_worker_gives_the_reference_result_exactly_once(
    kafka: KafkaEnv, tmp_path: Path
) -> None:
    votes, result = tmp_path / "votes.txt", tmp_path / "result.json"
    write_votes_file(votes, 24_000, contestants=12, seed=11)
    home = tmp_path / "home"
    env = {**os.environ, "TXSTREAM_HOME": str(home), "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap}
    killer = Killer(home / "run" / "worker.pid", "worker", kills=6, seed=11,
                    log=home / "log" / "worker.log", ready="resuming")  # fmt: skip
    killer.start()
    try:
        run = subprocess.run(
            [TXSTREAM, "leaderboard", "run", "--votes", str(votes), "--result", str(result),
             *SMALL],
            env=env, capture_output=True, text=True, timeout=500, check=False,
        )  # fmt: skip
    finally:
        killer.done.set()
        killer.join()
        for pidfile in (home / "run").glob("*.pid"):
            pid = int(pidfile.read_text())
            if is_alive(pid) and str(home) in cmdline(pid):
                os.kill(pid, signal.SIGKILL)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(killer.killed) >= 5, f"only {len(killer.killed)} kills landed: {run.stdout}"
    assert f"worker restarts: {len(killer.killed)}" in run.stdout

    got: dict[str, Any] = json.loads(result.read_text())
    expected = run_reference(votes, contestants=12, threshold=1000, window=100, slide=1)
    assert {k: got[k] for k in expected} == expected

    app = got["app"]
    settings = kafka.settings
    registry = SchemaRegistry(settings.schema_dir)
    accepted = BatchCodec(registry.get("leaderboard.AcceptedVote"))
    ids = [accepted.decode(v).batch_id for v in read_all(settings, f"{app}.accepted_votes")]
    assert sorted(ids) == list(range(1, 24_001)), "each batch exactly once on accepted_votes"

    due = BatchCodec(registry.get("leaderboard.RemovalDue"))
    due_ids = [due.decode(v).batch_id for v in read_all(settings, f"{app}.removals_due")]
    assert sorted(due_ids) == list(range(1, 24_001)), "each batch exactly once on removals_due"

    # the changelog records the last committed votes batch once per group: strictly rising
    last_batch_key = encode_key(("__sys__", "batch", "votes", 0))
    changelog = read_to_end(settings, f"{app}.changelog")
    marks = [decode_record(SYS_SCHEMA, v)["value"] for k, v in changelog if k == last_batch_key]
    assert marks == sorted(set(marks)) and marks[-1] == 24_000

    notice = registry.get("txstream.CommitNotice")
    ranges = []
    for v in read_all(settings, f"{app}.commits"):
        n: Any = decode_record(notice, v)
        if "votes" in n["first_batch_ids"]:
            ranges.append((n["first_batch_ids"]["votes"], n["last_batch_ids"]["votes"]))
    covered = [b for first, last in ranges for b in range(first, last + 1)]
    assert covered == list(range(1, 24_001)), "commit notices cover each batch exactly once"
