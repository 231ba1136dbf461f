"""TSpoon's bank transfers as a dataflow: a stream of transfers, each between two accounts
that usually live on different partition engines.

`transfer` is a spanning procedure: each batch of transfers runs as one transaction across
the engines owning its accounts, serializable in input order (TSpoon's PL4), so a transfer
sees every earlier one and money is neither created nor lost. A lower `isolation` (PL0-PL2)
runs faster on busy accounts and reads each epoch's starting balances, so it can lose
updates (`bank.transfer_reference` says exactly which), unless `formulas` moves the money
with formula updates (`table.add`), which apply to the balance as it stands when the batch
commits: then no money is made or lost, though a payer may still be overdrawn (its check
read the epoch's starting balance). A transfer that would
overdraw is refused (and reported), not aborted: the rest of its batch goes on. Accounts
are opened first, each on its own partition, by `open_accounts`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bank.records import NAMESPACE, Account, Opening, Transfer, TransferOutcome
from txstream import App, Isolation, Record, TxnContext


def build_app(
    name: str = "transfers",
    isolation: Isolation = Isolation.PL4,
    epoch: int = 16,
    formulas: bool = False,
) -> App:
    app = App(name, namespace=NAMESPACE)
    opens = app.stream("opens", schema=Opening, key_field="account")
    transfers = app.stream("transfers", schema=Transfer)
    outcomes = app.stream("transfer_outcomes", schema=TransferOutcome)
    accounts = app.table("accounts", schema=Account, key=("account",))

    @app.procedure(input=opens)
    def open_accounts(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for row in batch:
            rows.put(row["account"], {"balance": row["balance"]})

    def touches(t: Record) -> list[tuple[str, int]]:
        return [("accounts", t["payer"]), ("accounts", t["payee"])]

    @app.procedure(
        input=transfers, outputs=[outcomes], touches=touches, isolation=isolation, epoch=epoch
    )
    def transfer(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            payer, payee = rows.get(t["payer"]), rows.get(t["payee"])
            if payer is None or payee is None:
                outcome = "no_account"
            elif t["payer"] == t["payee"]:
                outcome = "same_account"
            elif payer["balance"] < t["amount"]:
                outcome = "insufficient_funds"
            elif formulas:
                rows.add(t["payer"], {"balance": -t["amount"]})
                rows.add(t["payee"], {"balance": t["amount"]})
                outcome = "done"
            else:
                rows.put(t["payer"], {"balance": payer["balance"] - t["amount"]})
                rows.put(t["payee"], {"balance": payee["balance"] + t["amount"]})
                outcome = "done"
            ctx.emit(outcomes, {"seq": t["seq"], "outcome": outcome})

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ..., "isolation": "PL4", "epoch": 16,
    "formulas": false}`."""
    return build_app(
        str(params.get("name", "transfers")),
        Isolation.parse(str(params.get("isolation", "PL4"))),
        int(params.get("epoch", 16)),
        bool(params.get("formulas", False)),
    )
