"""S-Store's EE-trigger micro-benchmark (Fig. 6): one procedure, a chain of in-TE triggers.

S-Store's EE triggers are SQL statements that fire inside the same transaction when a tuple
is inserted; its Fig. 6 chains them (an insert into s1 fires an insert into s2, ...) and
compares the chain with a procedure that issues every insert itself. Here the chain is
`length` tables e0..e(length-1): procedure `sp` writes each input tuple to e0, and an
`on_insert` trigger on each e(i) writes the tuple on to e(i+1), all inside sp's one TE.
With `triggers=False` the procedure makes the same writes itself, in a loop. Either way
e(i)[key] ends up as the last tuple with that key, its value plus i.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from chain.dataflow import Item
from txstream import App, Record, Table, TxnContext


def build_app(length: int, name: str = "ee-chain", triggers: bool = True) -> App:
    if length < 1:
        raise ValueError(f"a chain needs at least one table, not {length}")
    app = App(name, params={"length": length, "triggers": triggers}, namespace="chain")
    s0 = app.stream("s0", schema=Item, key_field="key")
    tables = [app.table(f"e{i}", schema=Item) for i in range(length)]

    @app.procedure(input=s0, name="sp")
    def sp(ctx: TxnContext, batch: Sequence[Record]) -> None:
        stages = tables[:1] if triggers else tables
        for tup in batch:
            for i, table in enumerate(stages):
                _write(ctx, table, tup["key"], tup["value"] + i)

    if triggers:
        for i in range(length - 1):
            app.on_insert(tables[i])(_pass_on(tables[i + 1]))
    return app


def _write(ctx: TxnContext, table: Table, key: int, value: int) -> None:
    ctx.table(table).put(key, {"key": key, "value": value})


def _pass_on(table: Table) -> Callable[[TxnContext, Record], None]:
    """The EE trigger on the table before `table`: insert the row into `table`, one more
    in value."""

    def fire(ctx: TxnContext, row: Record) -> None:
        _write(ctx, table, row["key"], row["value"] + 1)

    return fire
