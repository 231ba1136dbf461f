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
from txstream import App, Isolation, Record, Table, TableView, TxnContext


def build_app(
    name: str = "transfers",
    isolation: Isolation = Isolation.PL4,
    epoch: int = 16,
    formulas: bool = False,
) -> App:
    app = App(name, namespace=NAMESPACE)
    transfers = app.stream("transfers", schema=Transfer)
    outcomes = app.stream("transfer_outcomes", schema=TransferOutcome)
    accounts = open_accounts(app)

    @app.procedure(
        input=transfers, outputs=[outcomes], touches=touches, isolation=isolation, epoch=epoch
    )
    def transfer(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            outcome = move(rows, t["payer"], t["payee"], t["amount"], formulas)
            ctx.emit(outcomes, {"seq": t["seq"], "outcome": outcome})

    return app


def open_accounts(app: App) -> Table:
    """The accounts table, and the `opens` stream that opens each account on its own
    partition; returns the table."""
    opens = app.stream("opens", schema=Opening, key_field="account")
    accounts = app.table("accounts", schema=Account, key=("account",))

    @app.procedure(input=opens)
    def open_accounts(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for row in batch:
            rows.put(row["account"], {"balance": row["balance"]})

    return accounts


def touches(t: Record) -> list[tuple[str, int]]:
    """A transfer's keys: its payer's and its payee's accounts."""
    return [("accounts", t["payer"]), ("accounts", t["payee"])]


def move(rows: TableView, source: int, target: int, amount: int, formulas: bool = False) -> str:
    """`amount` from account `source` to `target`, if both exist, differ and `source` has
    it; the outcome. With `formulas`, by formula updates (`TableView.add`)."""
    payer, payee = rows.get(source), rows.get(target)
    if payer is None or payee is None:
        return "no_account"
    if source == target:
        return "same_account"
    if payer["balance"] < amount:
        return "insufficient_funds"
    if formulas:
        rows.add(source, {"balance": -amount})
        rows.add(target, {"balance": amount})
    else:
        rows.put(source, {"balance": payer["balance"] - amount})
        rows.put(target, {"balance": payee["balance"] + amount})
    return "done"


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ..., "isolation": "PL4", "epoch": 16,
    "formulas": false}`."""
    return build_app(
        str(params.get("name", "transfers")),
        Isolation.parse(str(params.get("isolation", "PL4"))),
        int(params.get("epoch", 16)),
        bool(params.get("formulas", False)),
    )
