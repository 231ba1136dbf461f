"""Damaged state directories: deleted or corrupted RocksDB, and a disk that fills up.

RocksDB is a cache of the recovery log. A worker SIGKILLed at a seeded random batch gets
its store damaged while it is down; the restarted worker must rebuild it (newest snapshot,
then the changelog or the command log) and finish with the serial reference's result,
each output batch exactly once.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kafka_env import KafkaEnv
from tests.support.scale import cases, scaled, seeds
from tests.support.worker_run import LeaderboardWorker
from txstream.config import Settings
from txstream.model.declarations import RecoveryMode

VOTES = scaled(6000, 12_000)


@pytest.fixture
def settings(kafka: KafkaEnv, tmp_path: Path) -> Settings:
    return kafka.settings.model_copy(update={"home": tmp_path / "home"})


def damage_store(store: Path, damage: str, rng: random.Random) -> str:
    """Delete the store, or replace one of its vital files with garbage (a new inode, as a
    bad write would leave it: snapshots hard-link the old one and stay intact)."""
    if damage == "deleted":
        shutil.rmtree(store)
        return "deleted"
    vital = ("CURRENT", "MANIFEST", ".sst")
    files = sorted(p for p in store.iterdir() if p.name.startswith(vital) or p.suffix in vital)
    victim = rng.choice(files)
    garbage = rng.randbytes(max(victim.stat().st_size, 64))
    tmp = victim.with_name(victim.name + ".garbage")
    tmp.write_bytes(garbage)
    tmp.rename(victim)
    return victim.name


@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", seeds([5], [5, 6, 7]))
@pytest.mark.parametrize(
    ("mode", "damage"),
    cases(
        [(RecoveryMode.WEAK, "corrupted")],
        [(m, d) for m in RecoveryMode for d in ("deleted", "corrupted")],
    ),
    ids=lambda v: str(v),
)
def test_damaged_store_is_rebuilt_to_the_reference_result(
    settings: Settings, tmp_path: Path, mode: RecoveryMode, damage: str, seed: int
) -> None:
    run = LeaderboardWorker(settings, tmp_path, mode, VOTES, seed)
    first = run.start_paced(rate=VOTES / 6)  # loading takes ~6 s; the worker keeps up
    run.wait_for(first, run.rng.randrange(run.last // 3, run.last * 2 // 3))
    first.kill()
    what = damage_store(run.state_dir, damage, run.rng)

    run.run_to_end()
    log = run.log.read_text()
    replayed = [int(n) for n in re.findall(r"recovered p0: (\d+)", log)]
    rebuilt = "starts from snapshot" in log or max(replayed) > 0
    assert rebuilt, f"{what}: no incarnation rebuilt state from a snapshot or the log"
    run.check_result()
    run.check_exactly_once()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs; mounting needs root, as on the CI machine."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.timeout(600)
def test_full_disk_fails_clearly_and_recovers_once_there_is_room(
    settings: Settings, tmp_path: Path, small_disk: Path
) -> None:
    run = LeaderboardWorker(settings, tmp_path, RecoveryMode.CHANGELOG, VOTES, seed=9)
    run.state_dir.parent.mkdir(parents=True)
    (small_disk / "p0").mkdir()
    run.state_dir.symlink_to(small_disk / "p0")
    filler = small_disk / "filler"

    def fill_the_disk() -> None:  # once the store is open: its first flush will not fit
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)

    worker = run.start(before_load=fill_the_disk)
    assert worker.proc.wait(180) != 0, "the worker must stop, not run on without its state"
    log = run.log.read_text()
    assert "No space left on device" in log and "p0" in log, log[-3000:]

    filler.unlink()  # room again: the next worker recovers from what Kafka committed
    run.run_to_end()
    run.check_result()
    run.check_exactly_once()
