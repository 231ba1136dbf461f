"""Transfers as a nested transaction across engines: `withdraw`, then `deposit`.

TSpoon's transactional subgraph, in S-Store's terms: each batch of transfers runs through
`withdraw` (on the payers' accounts) and then `deposit` (on the payees'), as one nested
transaction spanning the engines that own those accounts (`touches=` on the nested
transaction). `deposit` sees what `withdraw` did; and when `deposit` aborts (a payee with
no account), the whole batch is undone on every engine, withdrawals included: money is
never lost between the two steps, though they run on different engines. Every procedure
runs once per batch, on the whole batch, in nested order, as one engine would run it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bank.records import NAMESPACE, Transfer, TransferOutcome
from bank.stream_transfers import open_accounts
from txstream import App, Isolation, Record, TxnContext


def touches(t: Record) -> list[tuple[str, int]]:
    return [("accounts", t["payer"]), ("accounts", t["payee"])]


def build_app(
    name: str = "nested-transfers", isolation: Isolation = Isolation.PL4, epoch: int = 16
) -> App:
    app = App(name, namespace=NAMESPACE)
    transfers = app.stream("transfers", schema=Transfer)
    credits = app.stream("credits", schema=Transfer)
    refusals = app.stream("refusals", schema=TransferOutcome)
    done = app.stream("transfers_done", schema=TransferOutcome)
    accounts = open_accounts(app)

    @app.procedure(input=transfers, outputs=[credits, refusals])
    def withdraw(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            payer = rows.get(t["payer"])
            if payer is None or t["payer"] == t["payee"] or payer["balance"] < t["amount"]:
                why = "no_account" if payer is None else "refused"
                ctx.emit(refusals, {"seq": t["seq"], "outcome": why})
                continue
            rows.put(t["payer"], {"balance": payer["balance"] - t["amount"]})
            ctx.emit(credits, t)

    @app.procedure(input=credits, outputs=[done])
    def deposit(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            payee = rows.get(t["payee"])
            if payee is None:
                ctx.abort("no_account", f"transfer {t['seq']}: payee {t['payee']} has none")
            rows.put(t["payee"], {"balance": payee["balance"] + t["amount"]})
            ctx.emit(done, {"seq": t["seq"], "outcome": "done"})

    app.nested("transfer", [withdraw, deposit], touches=touches, isolation=isolation, epoch=epoch)
    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "nested-transfers")))
