"""Direct transactions inside a partition engine: a client's single-partition ACID
transaction answered by the engine itself, once, however often it is sent (no Kafka).

The same transaction through the broker, with a worker SIGKILLed between running it and
answering, is in tests/integration/test_direct.py.
"""

from __future__ import annotations

import pytest

from bank.dataflow import build_app
from tests.support.fakes import MemoryBase
from txstream.engine.direct import DIRECT_ORDER_TABLE, DIRECT_TABLE, DirectAnswers
from txstream.engine.partition_engine import PartitionEngine
from txstream.oltp.messages import EngineRequest, Fragment, TxnResult

REPLY_TO = "bank.oltp.out"


def opened() -> tuple[PartitionEngine, MemoryBase]:
    """An engine whose base holds accounts 1 and 2 with 100 each, committed."""
    base = MemoryBase()
    engine = PartitionEngine(build_app().dataflow(), base, partition=0, params={})
    direct(engine, 0, "open", Fragment.call(1, "open_accounts", accounts=[1, 2]))
    base.apply(engine.take_group())
    return engine, base


def direct(engine: PartitionEngine, offset: int, request_id: str, *frags: Fragment) -> bool:
    req = EngineRequest(f"P0.{offset}", 0, "direct", request_id, REPLY_TO, list(frags))
    return engine.participant.request(req)


def debit(account: int, amount: int) -> Fragment:
    return Fragment.call(account, "debit", account=account, amount=amount)


def balances(engine: PartitionEngine, base: MemoryBase) -> dict[int, int]:
    base.apply(engine.take_group())
    return {int(k[0]): row["balance"] for k, row in base.tables.get("accounts", {}).items()}


def answers(engine: PartitionEngine) -> list[tuple[str, TxnResult]]:
    return list(engine.group.results)


def test_a_direct_transaction_commits_and_answers_its_client_with_the_group() -> None:
    engine, base = opened()
    assert direct(engine, 1, "r1", debit(1, 30))
    ((to, result),) = answers(engine)
    assert to == REPLY_TO
    assert (result.request_id, result.txn_id, result.status) == ("r1", "P0.1", "committed")
    assert result.values() == [70] and result.partitions == [0]
    assert not engine.group.replies, "nothing for the coordinator"
    assert balances(engine, base) == {1: 70, 2: 100}


def test_a_resend_gets_the_first_answer_and_runs_no_second_time() -> None:
    engine, base = opened()
    assert direct(engine, 1, "r1", debit(1, 30))
    first = answers(engine)[0][1]
    base.apply(engine.take_group())  # committed, then the client resends after a timeout
    assert direct(engine, 7, "r1", debit(1, 30))
    ((_, again),) = answers(engine)
    assert again == first, "the answer of the first run, under its own name"
    assert balances(engine, base) == {1: 70, 2: 100}, "debited once"


def test_a_resend_in_the_same_group_is_answered_from_the_group() -> None:
    engine, base = opened()
    assert direct(engine, 1, "r1", debit(1, 30))
    assert direct(engine, 2, "r1", debit(1, 30))
    first, again = (r for _, r in answers(engine))
    assert first == again
    assert balances(engine, base) == {1: 70, 2: 100}


def test_an_abort_is_the_answer_and_is_kept_as_one() -> None:
    engine, base = opened()
    assert direct(engine, 1, "r1", debit(1, 500))  # more than the balance
    ((_, result),) = answers(engine)
    assert result.status == "aborted" and result.reason == "constraint_violation"
    assert direct(engine, 2, "r1", debit(1, 5))  # a resend never runs, even if it now could
    assert answers(engine)[1][1] == result
    assert balances(engine, base) == {1: 100, 2: 100}


def test_an_unknown_transaction_fails_naming_the_registered_ones() -> None:
    engine, _ = opened()
    assert direct(engine, 1, "r1", Fragment.call(1, "steal", account=1))
    ((_, result),) = answers(engine)
    assert (result.status, result.reason) == ("failed", "unknown_procedure")
    assert "'steal'" in result.detail and "debit" in result.detail


@pytest.mark.parametrize("remembered", [1, 3])
def test_only_the_newest_answers_are_kept(remembered: int) -> None:
    engine, base = opened()
    engine.participant.direct = DirectAnswers(engine.ledger, remembered)
    for n in range(1, 6):
        assert direct(engine, n, f"r{n}", debit(2, 1))
    base.apply(engine.take_group())
    kept = sorted(k[0] for k in base.tables[DIRECT_TABLE])
    assert kept == [f"r{n}" for n in range(6 - remembered, 6)]
    assert len(base.tables[DIRECT_ORDER_TABLE]) == remembered
    assert direct(engine, 9, "r5", debit(2, 1))  # the newest: answered, not run
    assert direct(engine, 10, "r1", debit(2, 1))  # forgotten: runs again
    assert balances(engine, base) == {1: 100, 2: 94}
