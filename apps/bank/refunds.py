"""Transfers and refunds on the same accounts: two spanning streams in one app.

`transfers` moves money from payer to payee, `refunds` moves it back from payee to payer;
both read and write the same account rows, on whichever engines own them. Their batches
share one id sequence (one producer sends both), and every engine runs them in that order,
so the result equals running every batch of either stream alone, in batch-id order, and no
two batches wait for each other across engines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bank.records import NAMESPACE, Transfer, TransferOutcome
from bank.stream_transfers import move, open_accounts, touches
from txstream import App, Record, TxnContext


def build_app(name: str = "refunds") -> App:
    app = App(name, namespace=NAMESPACE)
    transfers = app.stream("transfers", schema=Transfer)
    refunds = app.stream("refunds", schema=Transfer)
    transferred = app.stream("transfer_outcomes", schema=TransferOutcome)
    refunded = app.stream("refund_outcomes", schema=TransferOutcome)
    accounts = open_accounts(app)

    @app.procedure(input=transfers, outputs=[transferred], touches=touches)
    def transfer(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            outcome = move(rows, t["payer"], t["payee"], t["amount"])
            ctx.emit(transferred, {"seq": t["seq"], "outcome": outcome})

    @app.procedure(input=refunds, outputs=[refunded], touches=touches)
    def refund(ctx: TxnContext, batch: Sequence[Record]) -> None:
        rows = ctx.table(accounts)
        for t in batch:
            outcome = move(rows, t["payee"], t["payer"], t["amount"])
            ctx.emit(refunded, {"seq": t["seq"], "outcome": outcome})

    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's factory: `{"name": ...}`."""
    return build_app(str(params.get("name", "refunds")))
