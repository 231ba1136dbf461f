"""The bank app: an `accounts` table with `balance >= 0`, and the transactions over it.

A transfer is two fragments, `debit` on the payer's key and `credit` on the payee's: one
transaction in one engine when both accounts live in the same partition, a 2PC
transaction across two engines otherwise. A debit that would overdraw breaks the
constraint, and the whole transfer aborts with that reason.

A payroll dataflow runs on the same table: each `payroll` batch is paid by one employer
account to employees of the same partition, as a nested transaction of two procedures
(`withhold` takes the total from the employer, `pay` hands it out), so money is only ever
in flight inside one nested transaction that nothing can interleave with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from bank.records import NAMESPACE, Account, Payment
from txstream import App, Record, Table, TxnContext

INITIAL_BALANCE = 100


class OpenAccounts(TypedDict):
    accounts: list[int]
    balance: NotRequired[int]


class Move(TypedDict):
    account: int
    amount: int


def build_app(name: str = "bank", recovery: str = "changelog") -> App:
    app = App(name, recovery=recovery, namespace=NAMESPACE)
    accounts = app.table("accounts", schema=Account, key=("account",),
                         constraints={"balance >= 0": _non_negative})  # fmt: skip
    payroll = app.stream("payroll", schema=Payment, key_field="employer")
    payouts = app.stream("payouts", schema=Payment)

    @app.transaction(params=OpenAccounts)
    def open_accounts(ctx: TxnContext, params: Record) -> int:
        """Open each listed account not open yet, with the starting balance."""
        rows = ctx.table(accounts)
        opened = 0
        for a in params["accounts"]:
            if rows.get(a) is None:
                rows.put(a, {"balance": params.get("balance", INITIAL_BALANCE)})
                opened += 1
        return opened

    @app.transaction(params=Move)
    def debit(ctx: TxnContext, params: Record) -> int:
        return _move(ctx, accounts, params["account"], -int(params["amount"]))

    @app.transaction(params=Move)
    def credit(ctx: TxnContext, params: Record) -> int:
        return _move(ctx, accounts, params["account"], int(params["amount"]))

    @app.procedure(input=payroll, outputs=[payouts])
    def withhold(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for line in batch:
            _move(ctx, accounts, line["employer"], -line["amount"])
            ctx.emit(payouts, line)

    @app.procedure(input=payouts)
    def pay(ctx: TxnContext, batch: Sequence[Record]) -> None:
        for line in batch:
            _move(ctx, accounts, line["employee"], line["amount"])

    app.nested("payday", [withhold, pay])
    return app


def from_params(params: Mapping[str, Any]) -> App:
    """The worker's and coordinator's factory: `{"name": ..., "recovery": ...}`."""
    return build_app(str(params.get("name", "bank")), str(params.get("recovery", "changelog")))


def _move(ctx: TxnContext, accounts: Table, account: int, delta: int) -> int:
    rows = ctx.table(accounts)
    row = rows.get(account)
    if row is None:
        ctx.abort("no_account", f"account {account} is not open")
    assert row is not None
    balance = int(row["balance"]) + delta
    rows.put(account, {"balance": balance})
    return balance


def _non_negative(row: Record) -> bool:
    return int(row["balance"]) >= 0
