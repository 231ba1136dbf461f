"""The serial reference of `stream_transfers`, at every isolation level it can run at.

At PL3 and PL4 the batches run one at a time in batch order. Below PL3 each batch reads the
balances as they stood when its epoch (batch id // `epoch`) began, and its own writes; its
writes land in batch order (`txstream.engine.epochs`). So two transfers from one account in
one epoch both see the epoch's balance, the second's debit overwrites the first's, and
money appears: the lost update read committed allows, which a benchmark at those levels
shows rather than hides. With `formulas` the batch's changes are added to the balances as
they stand when it commits, whatever it read: no money appears, but a payer whose check
read an older balance may end below zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from txstream import Isolation, Record


def reference(
    opening: Mapping[int, int],
    batches: Sequence[Sequence[Record]],
    isolation: Isolation = Isolation.PL4,
    epoch: int = 16,
    formulas: bool = False,
) -> tuple[dict[int, str], dict[int, int]]:
    """Every transfer's outcome by `seq`, and the balances after the last batch."""
    balances = dict(opening)
    start, at = balances, -1
    outcomes: dict[int, str] = {}
    for batch_id, batch in enumerate(batches, 1):
        if isolation.epochs and batch_id // epoch != at:
            start, at = dict(balances), batch_id // epoch
        seen = start if isolation.epochs else balances
        moved: dict[int, int] = {}  # this batch's change of each account
        for t in batch:
            payer, payee, amount = t["payer"], t["payee"], t["amount"]
            if payer not in seen or payee not in seen:
                outcome = "no_account"
            elif payer == payee:
                outcome = "same_account"
            elif seen[payer] + moved.get(payer, 0) < amount:
                outcome = "insufficient_funds"
            else:
                moved[payer] = moved.get(payer, 0) - amount
                moved[payee] = moved.get(payee, 0) + amount
                outcome = "done"
            outcomes[t["seq"]] = outcome
        for account, change in moved.items():
            balances[account] = (balances if formulas else seen)[account] + change
    return outcomes, balances
