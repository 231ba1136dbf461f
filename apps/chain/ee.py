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

from txstream import App, Record, TxnContext


def build_app(length: int, name: str = "ee-chain", triggers: bool = True) -> App:
    if length < 1:
        raise ValueError(f"a chain needs at least one table, not {length}")
    app = App(name, params={"length": length, "triggers": triggers})
    s0 = app.stream("s0", schema="chain.Item", key_field="key")
    for i in range(length):
        app.table(f"e{i}", schema="chain.Item")

    @app.procedure(input=s0, name="sp")
    def sp(ctx: TxnContext, batch: Sequence[Record]) -> None:
        stages = 1 if triggers else length
        for tup in batch:
            for i in range(stages):
                _write(ctx, i, tup["key"], tup["value"] + i)

    if triggers:
        for i in range(length - 1):
            app.on_insert(f"e{i}")(_pass_on(i + 1))
    return app


def _write(ctx: TxnContext, stage: int, key: int, value: int) -> None:
    ctx.table(f"e{stage}").put(key, {"key": key, "value": value})


def _pass_on(stage: int) -> Callable[[TxnContext, Record], None]:
    """The EE trigger on e(stage-1): insert the row into e(stage), one more in value."""

    def fire(ctx: TxnContext, row: Record) -> None:
        _write(ctx, stage, row["key"], row["value"] + 1)

    return fire
