"""A nested transaction spanning engines (`bank.nested_transfers`: withdraw, then deposit)
against the same app on one engine.

Each seed opens random accounts, sends random transfers (some to a payee with no account,
which aborts the whole batch) in batches broadcast to P simulated engines, with random
interleavings and crashes, and compares every engine's committed accounts and the outputs
with `AppTester` running the same batches on one engine, where nothing spans anything:
the nested order (deposit sees withdraw's effects), the abort of the whole batch across
engines, and exactly-once must all hold for them to agree. Half the seeds run it at PL2
(both sides), where each batch reads as of its epoch's start.
"""

from __future__ import annotations

import random

import pytest

from bank.nested_transfers import build_app
from tests.support.scale import scaled
from tests.support.simulation.spanning import Log, SpanCluster, broadcast
from txstream.kafka.routing import partition_of
from txstream.model.declarations import Isolation, Record
from txstream.testing import AppTester

OUTPUTS = ("refusals", "transfers_done")


@pytest.mark.parametrize("seed", range(scaled(150, 3_000)))
def test_nested_across_engines_equals_one_engine(seed: int) -> None:
    rng = random.Random(seed)
    partitions, accounts = rng.randint(1, 4), rng.randint(2, 10)
    opening = {a: rng.randint(0, 100) for a in range(accounts)}
    transfers: list[Record] = [
        {"seq": i, "payer": rng.randrange(accounts), "payee": rng.randrange(accounts + 1),
         "amount": rng.randint(1, 60)}
        for i in range(rng.randint(1, 60))
    ]  # fmt: skip
    k = rng.choice([1, 3, 20])
    batches = [transfers[i : i + k] for i in range(0, len(transfers), k)]
    opens: Log = [[] for _ in range(partitions)]
    for a, balance in opening.items():
        p = partition_of((a,), partitions)
        opens[p].append(("opens", len(opens[p]) + 1, [{"account": a, "balance": balance}]))
    phases = [{"opens": opens}, {"transfers": broadcast("transfers", batches, partitions)}]
    isolation = rng.choice([Isolation.PL4, Isolation.PL2])
    epoch = rng.choice([1, 2, 5])
    cluster = SpanCluster(build_app("n", isolation, epoch), partitions, phases, seed)
    cluster.run(crash_rate=rng.choice([0.0, 0.05]))

    one = AppTester(build_app("n", isolation, epoch))
    for a, balance in opening.items():
        one.feed("opens", [{"account": a, "balance": balance}])
    for batch in batches:
        one.feed("transfers", batch)
    where = f"seed {seed}: P={partitions} K={k} {isolation}, {cluster.crashes} crashes"
    assert cluster.tables()["accounts"] == one.table("accounts"), where
    assert cluster.misplaced() == [], where
    for stream in OUTPUTS:
        got = sorted(t["seq"] for o in cluster.outputs if o.stream == stream for t in o.tuples)
        assert got == sorted(t["seq"] for t in one.outputs(stream)), f"{where}: {stream}"
    if isolation is Isolation.PL4:  # below PL3 a stale balance may make or lose money
        total = sum(r["balance"] for r in cluster.tables()["accounts"].values())
        assert total == sum(opening.values()), where


def test_a_payee_without_an_account_undoes_the_whole_batch_on_every_engine() -> None:
    """Payers and payees on different engines: the abort in deposit, on one engine, also
    undoes withdraw's debit on the others."""
    partitions = 4
    opening = {0: 100, 1: 100, 2: 100}
    batch = [{"seq": 0, "payer": 0, "payee": 1, "amount": 10},
             {"seq": 1, "payer": 2, "payee": 7, "amount": 20}]  # fmt: skip
    engines = {partition_of((a,), partitions) for a in (0, 1, 2, 7)}
    assert len(engines) > 1
    opens: Log = [[] for _ in range(partitions)]
    for a, balance in opening.items():
        p = partition_of((a,), partitions)
        opens[p].append(("opens", len(opens[p]) + 1, [{"account": a, "balance": balance}]))
    phases = [{"opens": opens}, {"transfers": broadcast("transfers", [batch], partitions)}]
    cluster = SpanCluster(build_app(), partitions, phases, seed=3)
    cluster.run()
    assert {k[0]: r["balance"] for k, r in cluster.tables()["accounts"].items()} == opening
    assert [o for o in cluster.outputs if o.tuples] == []
