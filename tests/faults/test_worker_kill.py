"""`txstream leaderboard run` end to end in each recovery mode, with its worker SIGKILLed
at seeded random moments.

The result must equal the serial reference, and reading every output and notice topic with
read_committed must show each batch exactly once; so must the recovery log itself.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from leaderboard.votegen import write_votes_file
from tests.support.kafka_env import KafkaEnv
from tests.support.kafka_reads import read_to_end
from tests.support.killer import Killer, kill_leftovers
from tests.support.reference.leaderboard_ref import run_reference
from tests.support.scale import cases, scaled, seeds
from txstream.config import Settings, project_root
from txstream.model.declarations import RecoveryMode
from txstream.recovery.command_log import CommandLogCodec
from txstream.schemas.codec import BatchCodec
from txstream.schemas.records import decode_record
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import SYS_SCHEMA
from txstream.state.keys import encode_key

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")
SMALL = ["--contestants", "12", "--threshold", "1000", "--window", "100", "--slide", "1"]
# Every kill must land while the worker still has work: a kill during the run's shutdown is
# not restarted, and the restart count would then miss it. Four kill-and-restart cycles
# take ~11 s, in which a worker at ~7k batches/s between kills gets through ~20k votes.
VOTES, KILLS = scaled(60_000, 160_000), scaled(4, 10)


def read_all(settings: Settings, topic: str) -> list[bytes]:
    return [value for _, value in read_to_end(settings, topic)]


@pytest.mark.slow  # a worker SIGKILLed mid-run (~60 s): runs in make faults
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", seeds([11], [11, 12, 13]))
@pytest.mark.parametrize("mode", cases([RecoveryMode.STRONG], list(RecoveryMode)), ids=str)
def test_sigkilled_worker_gives_the_reference_result_exactly_once(
    kafka: KafkaEnv, tmp_path: Path, mode: RecoveryMode, seed: int
) -> None:
    votes, result = tmp_path / "votes.txt", tmp_path / "result.json"
    write_votes_file(votes, VOTES, contestants=12, seed=seed)
    home = tmp_path / "home"
    env = {**os.environ, "TXSTREAM_HOME": str(home), "TXSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap}
    killer = Killer(home / "run" / "worker.pid", "worker", kills=KILLS, seed=seed,
                    log=home / "log" / "worker.log", ready="resuming")  # fmt: skip
    killer.start()
    try:
        run = subprocess.run(
            [TXSTREAM, "leaderboard", "run", "--votes", str(votes), "--result", str(result),
             "--recovery", str(mode), *SMALL],
            env=env, capture_output=True, text=True, timeout=800, check=False,
        )  # fmt: skip
    finally:
        killer.done.set()
        killer.join()
        kill_leftovers(home)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(killer.killed) >= KILLS - 1, f"only {len(killer.killed)} kills: {run.stdout}"
    assert f"worker restarts: {len(killer.killed)}" in run.stdout

    got: dict[str, Any] = json.loads(result.read_text())
    expected = run_reference(votes, contestants=12, threshold=1000, window=100, slide=1)
    assert {k: got[k] for k in expected} == expected

    app, settings, everyone = got["app"], kafka.settings, list(range(1, VOTES + 1))
    registry = SchemaRegistry(settings.schema_dir)
    accepted = BatchCodec(registry.get("leaderboard.AcceptedVote"))
    ids = [accepted.decode(v).batch_id for v in read_all(settings, f"{app}.accepted_votes")]
    assert sorted(ids) == everyone, "each batch exactly once on accepted_votes"

    due = BatchCodec(registry.get("leaderboard.RemovalDue"))
    due_ids = [due.decode(v).batch_id for v in read_all(settings, f"{app}.removals_due")]
    assert sorted(due_ids) == everyone, "each batch exactly once on removals_due"

    # a snapshot truncates the command log below itself: what is left holds each batch from
    # its first one on exactly once
    logged = logged_vote_batches(settings, registry, app, mode)
    assert logged and logged == everyone[logged[0] - 1 :], "each logged batch exactly once"
    notice = registry.get("txstream.CommitNotice")
    ranges = []
    for v in read_all(settings, f"{app}.commits"):
        n: Any = decode_record(notice, v)
        if "votes" in n["first_batch_ids"]:
            ranges.append((n["first_batch_ids"]["votes"], n["last_batch_ids"]["votes"]))
    covered = [b for first, last in ranges for b in range(first, last + 1)]
    assert covered == everyone, "commit notices cover each batch exactly once"


def logged_vote_batches(
    settings: Settings, registry: SchemaRegistry, app: str, mode: RecoveryMode
) -> list[int]:
    """The votes batches as the recovery log records them, in log order."""
    if mode is RecoveryMode.CHANGELOG:
        # the last committed votes batch, once per group: strictly rising, ending at the last
        key = encode_key(("__sys__", "batch", "votes", 0))
        marks = [
            decode_record(SYS_SCHEMA, v)["value"]
            for k, v in read_to_end(settings, f"{app}.changelog")
            if k == key
        ]
        assert marks == sorted(set(marks)), "changelog marks rise strictly"
        return list(range(1, marks[-1] + 1))
    codec = CommandLogCodec(registry, app, 0, mode)
    return [
        e.batch_id
        for _, v in read_to_end(settings, f"{app}.cmdlog")
        for e in codec.decode(v).entries
        if e.stream == "votes"
    ]
