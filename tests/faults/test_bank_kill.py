"""`txstream bank run` with the coordinator and a worker each SIGKILLed 3 times (or more
in `make faults`), on 4 partitions in 2 worker processes.

Every snapshot query during the run and the end state must show the total money
conserved and no negative balance. Beyond the totals, the end state must equal the
opening balances plus exactly the transfers the client was told committed: none lost to
a crash, none applied twice by a replay.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bank.run import BankConfig, BankRun
from tests.support.bank_checks import check_end_state
from tests.support.kafka_env import KafkaEnv
from tests.support.scale import scaled, seeds
from tests.support.sequencer_driver import unique
from txstream.config import Settings
from txstream.pids import is_alive

pytestmark = pytest.mark.kafka

ACCOUNTS, TRANSFERS, KILLS = scaled(1000, 5000), scaled(1500, 8000), scaled(3, 6)


@pytest.mark.slow  # coordinator and workers killed (~60 s): runs in make faults
@pytest.mark.parametrize("seed", seeds([1], [1, 2, 3]))
def test_bank_run_conserves_money_across_kills(kafka: KafkaEnv, tmp_path: Path, seed: int) -> None:
    settings = Settings(home=tmp_path / "home", kafka_bootstrap=kafka.bootstrap)
    name = unique("bankkill").replace("-", "_")
    config = BankConfig(
        ACCOUNTS,
        TRANSFERS,
        partitions=4,
        workers=2,
        seed=seed,
        kill_coordinator=KILLS,
        kill_worker=KILLS,
        name=name,
    )
    run = BankRun(config, settings)
    services = run.services()
    report = run.run()

    assert report.kills == {"coordinator": KILLS, "worker": KILLS}
    assert report.restarts[f"{name}-coordinator"] >= KILLS
    assert report.snapshots, "no snapshot query was answered during the run"
    assert not report.violations(), report.violations()
    committed = sum(n for k, n in report.outcomes.items() if "committed" in k)
    assert committed > TRANSFERS // 2, report.outcomes
    assert report.unknown == 0, "every transfer got an outcome"
    for s in services:
        pid = s.child_pid()
        assert pid is None or not is_alive(pid), f"{s.files.name} left running"

    check_end_state(config, settings, run)
