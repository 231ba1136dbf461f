"""The bank's end state after a faulty run: exactly the opening balances plus the transfers
the client was told committed, none lost to a crash, none applied twice by a replay."""

from __future__ import annotations

from bank.dataflow import INITIAL_BALANCE
from bank.run import BankConfig, BankRun
from txstream.client import TxClient
from txstream.config import Settings


def check_end_state(config: BankConfig, settings: Settings, run: BankRun) -> None:
    """Start the app's services again, read every balance, and compare."""
    expected = {a: INITIAL_BALANCE + run.deltas.get(a, 0) for a in range(config.accounts)}
    run_again = BankRun(config, settings)  # the same app, to read its end state
    for s in run_again.services():
        s.start()
    try:
        with TxClient(config.name, settings, timeout_s=30) as client:
            got = {k[0]: row["balance"] for k, row in client.query("accounts").table_rows()}
    finally:
        for s in run_again.services():
            s.stop()
    wrong = {a: (got.get(a), v) for a, v in expected.items() if got.get(a) != v}
    assert not wrong, (
        f"{len(wrong)} balances differ from the committed transfers: {list(wrong.items())[:5]}"
    )
