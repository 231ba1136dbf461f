"""`txstream verify`'s pure parts: the order the engine records its border batches and OLTP
records in, how that order picks what to replay, the replay of OLTP records, the
aggregation constraints checked on committed rows, and the apps it refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bank.dataflow import build_app as bank
from bank.stream_transfers import build_app as transfers
from bank.transfer_reference import reference
from inventory.dataflow import build_app as inventory
from leaderboard.dataflow import Params, build_app
from orders.sales import build_app as sales
from tests.support.fakes import MemoryBase
from txstream import App, Isolation, Key, Record, TxnContext
from txstream.config import Settings
from txstream.engine.group import BatchRun, decode_order, encode_order
from txstream.engine.hops import Part
from txstream.engine.partition_engine import PartitionEngine
from txstream.kafka.topics import AppTopics
from txstream.oltp.messages import CoordinatorLog, Decision, EngineRequest, Fragment
from txstream.testing import AppTester
from txstream.testing.run_inputs import Unverifiable, check_named, hop_input, ran_in_order
from txstream.testing.verify import (
    _broken,
    _merged,
    _replay,
    refuse,
    serialized_totals,
    unseen,
    unsummed,
)

VOTE = {"vote_id": 1, "phone_number": 6175550101, "contestant_number": 1}


def test_the_group_records_the_border_batches_in_the_order_they_ran() -> None:
    t = AppTester(build_app(Params(contestants=3)))
    engine = t.engine
    for stream, batch_id in [("votes", 1), ("votes", 4), ("contestant_rows", 1), ("votes", 9)]:
        tuples = [{"contestant_number": 1, "contestant_name": "A", "num_votes": 0}]
        engine.process(stream, batch_id, [VOTE] if stream == "votes" else tuples)
    order = engine.take_group().order
    assert order == [
        BatchRun("votes", 1, 4),
        BatchRun("contestant_rows", 1, 1),
        BatchRun("votes", 9, 9),
    ]
    assert decode_order(encode_order(order)) == order
    assert engine.take_group().order == []  # a new group starts empty


def test_the_order_replays_the_partition_s_batches_and_skips_ids_it_never_had() -> None:
    order = [BatchRun("votes", 1, 4), BatchRun("contestant_rows", 1, 1), BatchRun("votes", 9, 9)]
    inputs = {"votes": {1: [{"v": 1}], 3: [{"v": 3}], 9: [{"v": 9}], 12: [{"v": 12}]},
              "contestant_rows": {1: [{"c": 1}]}}  # fmt: skip
    assert [(s, i) for s, i, _ in ran_in_order(order, inputs, {})] == [
        ("votes", 1),
        ("votes", 3),  # 2 and 4 went to other partitions
        ("contestant_rows", 1),
        ("votes", 9),  # 12 never ran: not committed yet when the run stopped
    ]
    with pytest.raises(Unverifiable, match="'accepted_votes', not a border stream"):
        list(ran_in_order([BatchRun("accepted_votes", 1, 1)], inputs, {}))


def request(kind: str, txn_id: str, *fragments: Fragment) -> EngineRequest:
    return EngineRequest(txn_id, 1, kind, f"req-{txn_id}", "bank.oltp.out", list(fragments))


def move(kind: str, account: int, amount: int) -> Fragment:
    return Fragment.call(account, kind, account=account, amount=amount)


def test_oltp_records_are_in_the_order_by_offset_and_replay_there() -> None:
    """Requests and decisions are named by topic and offset among the batches; reads are
    skipped; a prepared transaction's writes land where its decision came."""
    t = AppTester(bank())
    t.engine.journal_oltp("bank.requests", 4)
    t.engine.journal_oltp("bank.requests", 5)
    t.engine.journal_oltp("bank.decisions", 0)
    t.engine.journal_oltp("bank.requests", 7)
    assert t.engine.take_group().order == [
        BatchRun("bank.requests", 4, 5),
        BatchRun("bank.decisions", 0, 0),
        BatchRun("bank.requests", 7, 7),
    ]
    opened = Fragment.call(1, "open_accounts", accounts=[1, 2])
    oltp: dict[str, dict[int, Any]] = {
        "bank.requests": {
            4: request("run", "1.1", opened),
            5: request("prepare", "1.2", move("debit", 1, 30)),
            6: EngineRequest("1.3", 1, "read", "r", "bank.oltp.out"),
            7: request("run", "1.4", move("credit", 2, 5)),
        },
        "bank.decisions": {0: Decision("1.2", 1, True)},
    }
    order = [BatchRun("bank.requests", 4, 6), BatchRun("bank.decisions", 0, 0),
             BatchRun("bank.requests", 7, 7)]  # fmt: skip
    ran = list(ran_in_order(order, {}, oltp))
    assert [(s, i) for s, i, _ in ran] == [
        ("bank.requests", 4), ("bank.requests", 5), ("bank.decisions", 0), ("bank.requests", 7)
    ]  # fmt: skip
    reference = _replay(bank(), Settings(), ran)
    assert reference.table("accounts") == {(1,): {"balance": 70}, (2,): {"balance": 105}}
    # the decision left out: the debit stays held, and the credit waits for nothing
    held = _replay(bank(), Settings(), [e for e in ran if e[0] != "bank.decisions"])
    assert held.table("accounts")[(1,)] == {"balance": 100}
    with pytest.raises(Unverifiable, match="offset 9 was handled by the engine"):
        list(ran_in_order([BatchRun("bank.requests", 9, 9)], {}, oltp))


def test_aggregation_constraints_are_checked_on_every_partition_s_rows_together() -> None:
    def site(item: int, site: int, qty: int) -> tuple[Key, Record]:
        return (item, site), {"item": item, "site": site, "qty": qty}

    p0 = {"stock": dict([site(1, 1, 5), site(2, 1, -4)])}
    p1 = {"stock": dict([site(1, 2, -5), site(2, 2, 3)])}
    assert _broken(inventory(), [p0, p1]) == (
        "'sum(qty) >= 0 group by item' on table 'stock' breaks for group "
        '["stock", "sum(qty) >= 0 group by item", [2]]: -1',
    )
    assert _broken(inventory(), [p0]) != () and _broken(inventory(), [p1, p1]) != ()
    assert _broken(inventory(), [{"stock": dict([site(1, 1, 5)])}, p1]) == ()


def test_each_constrained_group_s_committed_sum_is_serialize_s_total() -> None:
    """Apart from the replay: the rows of each group add up to the deltas SERIALIZE
    committed (a totals record, then the promises committed after it; aborted ones and
    those before the totals record do not count again)."""

    def key(item: int) -> str:
        return json.dumps(["stock", "sum(qty) >= 0 group by item", [item]])

    def serialized(txn: str, commit: bool, item: int, delta: int) -> CoordinatorLog:
        deltas = json.dumps([[key(item), delta]])
        return CoordinatorLog("serialized", 1, txn, commit=commit, results=deltas)

    log = [
        serialized("P0.0", True, 1, 9),
        CoordinatorLog("totals", 1, results=json.dumps({key(1): 7})),
        serialized("P0.1", True, 1, -2),
        serialized("P1.0", False, 2, 50),
        serialized("P1.1", True, 2, 3),
    ]
    totals = serialized_totals(log)
    assert totals == {key(1): 5.0, key(2): 3.0}

    def site(item: int, site: int, qty: int) -> tuple[Key, Record]:
        return (item, site), {"item": item, "site": site, "qty": qty}

    p0 = {"stock": dict([site(1, 1, 2), site(2, 1, 1)])}
    p1 = {"stock": dict([site(1, 2, 3), site(2, 2, 2)])}
    assert unsummed(inventory(), [p0, p1], totals) == ()
    p1["stock"][(1, 2)]["qty"] = 13  # a promise's +10 applied twice, or one never serialized
    assert unsummed(inventory(), [p0, p1], totals) == (
        "'sum(qty) >= 0 group by item' on table 'stock', group [1]: the committed rows "
        "come to 15, the promises SERIALIZE committed to 5",
    )
    assert len(unsummed(inventory(), [p0], totals)) == 2, "p1's rows missing: both groups"


def transfers_with_oltp() -> App:
    app = transfers()

    @app.transaction()
    def nothing(ctx: TxnContext, params: Record) -> None:
        return None

    return app


def test_an_app_whose_inputs_are_not_replayed_yet_is_refused_by_name() -> None:
    refuse(build_app(Params()))  # border streams only: fine
    refuse(bank())  # OLTP transactions too
    with pytest.raises(Unverifiable, match=r"OLTP transactions \(\w+.*\) beside spanning"):
        refuse(transfers_with_oltp())
    with pytest.raises(Unverifiable, match="strong recovery"):
        refuse(build_app(Params(), recovery="strong"))


def test_spanning_batches_cut_every_partition_s_order_into_one() -> None:
    def opens(p: int, b: int) -> tuple[str, int, list[Record]]:
        return ("opens", b, [{"p": p}])

    def moves(b: int) -> tuple[str, int, list[Record]]:
        return ("transfers", b, [{"b": b}])

    runs = [
        [opens(0, 1), moves(1), opens(0, 2), moves(2)],
        [moves(1), opens(1, 1), moves(2), opens(1, 2)],
    ]
    assert _merged(runs, frozenset({"transfers"})) == [
        opens(0, 1), moves(1), opens(0, 2), opens(1, 1), moves(2), opens(1, 2)
    ]  # fmt: skip
    runs[1] = [moves(2), moves(1)]
    with pytest.raises(Unverifiable, match="partition 1 ran batch 1 of 'transfers' out of"):
        _merged(runs, frozenset({"transfers"}))


def test_spanning_batches_each_cut_only_the_partitions_that_ran_them() -> None:
    """Routed batches: each partition ran only those touching it; each batch comes once,
    in batch order, after what every partition that ran it ran before it."""

    def opens(p: int, b: int) -> tuple[str, int, list[Record]]:
        return ("opens", b, [{"p": p}])

    def moves(b: int) -> tuple[str, int, list[Record]]:
        return ("transfers", b, [{"b": b}])

    runs = [
        [opens(0, 1), moves(1), opens(0, 2), moves(3)],
        [opens(1, 1), moves(2), opens(1, 2), moves(3)],
        [opens(2, 1)],
    ]
    assert _merged(runs, frozenset({"transfers"})) == [
        opens(0, 1), moves(1), opens(1, 1), moves(2), opens(0, 2), opens(1, 2), moves(3),
        opens(2, 1),
    ]  # fmt: skip


def test_a_spanning_app_replays_on_one_engine_at_its_level() -> None:
    """The reference of a spanning app is one engine owning every key, at the app's level:
    at PL2 it reads each epoch's start as the many engines did."""
    app = transfers("t", Isolation.PL2, 4)
    tester = AppTester(app)
    tester.feed("opens", [{"account": 0, "balance": 10}, {"account": 1, "balance": 0}], 1)
    for b in (1, 2, 3):
        tester.feed("transfers", [{"seq": b, "payer": 0, "payee": 1, "amount": 4}], b)
    want = reference({0: 10, 1: 0}, [[{"seq": b, "payer": 0, "payee": 1, "amount": 4}]
                                     for b in (1, 2, 3)], Isolation.PL2, 4)[1]  # fmt: skip
    assert {k[0]: r["balance"] for k, r in tester.table("accounts").items()} == want
    assert want == {0: 6, 1: 4}  # three debits from 10 read at the epoch's start: one lands


def test_per_partition_batch_ids_that_repeat_across_partitions_all_replay() -> None:
    """Each partition's producer numbers its own `opens` batches from 1: in the merged order
    the second partition's batch 1 is not a repeat of the first's."""
    move = ("transfers", 1, [{"seq": 0, "payer": 0, "payee": 1, "amount": 4}])
    runs = [
        [("opens", 1, [{"account": 0, "balance": 10}]), move],
        [("opens", 1, [{"account": 1, "balance": 0}]), move],
    ]
    ran = _merged(runs, frozenset({"transfers"}))
    tester = _replay(transfers(), Settings(), ran)
    assert {k[0]: r["balance"] for k, r in tester.table("accounts").items()} == {0: 6, 1: 4}


def test_a_run_whose_order_names_no_oltp_records_is_refused() -> None:
    """Written by an engine older than the OLTP replay: refused, not called divergent."""
    oltp: dict[str, dict[int, Any]] = {"bank.requests": {0: request("run", "1.1")}}
    with pytest.raises(Unverifiable, match=r"bank\.requests holds 1: the run was committed"):
        check_named([BatchRun("payroll", 1, 2)], oltp, 0)
    check_named([BatchRun("bank.requests", 0, 0)], oltp, 0)  # named: fine
    check_named([BatchRun("payroll", 1, 2)], {"bank.requests": {}}, 0)  # no OLTP input: fine


def test_every_verdict_says_what_it_cannot_see() -> None:
    """The replay shares the engine's code, and OLTP apps' decisions are taken as read:
    each verdict says so, for the app it is about."""
    streaming = unseen(build_app(Params()))
    assert any("same engine code" in u for u in streaming)
    assert not any("coordinator" in u for u in streaming)
    oltp = unseen(inventory())
    assert any("whether the coordinator decided right" in u for u in oltp)
    assert any("dead-lettered" in u for u in oltp)


def order_event(seq: int, customer: int, item: int, amount: int = 1) -> Record:
    return {"seq": seq, "kind": "O", "order_id": seq, "customer": customer, "item": item,
            "amount": amount}  # fmt: skip


@pytest.mark.parametrize("ordered", [False, True])
def test_the_engine_names_the_hop_parts_and_batches_it_ran(ordered: bool) -> None:
    """An unordered part by its offset in the hop's topic, an ordered batch by its id once
    every sender has passed it (a part, or a progress mark with no tuples)."""
    app = sales(ordered=ordered)
    topic = AppTopics(app.name).hop("tally")
    engine = PartitionEngine(app.dataflow(), MemoryBase(), 0, {}, partitions=2)
    engine.process_hop("tally", 0, 1, [order_event(1, 1, 7)], (topic, 0, 5))
    engine.process_hop("tally", 1, 1, [] if ordered else [order_event(2, 2, 7)], (topic, 0, 6))
    engine.process_hop("tally", 1, 2, [order_event(3, 2, 7)], (topic, 0, 7))
    engine.process_hop("tally", 0, 2, [], (topic, 0, 8))
    order = engine.take_group().order
    assert order == ([BatchRun(topic, 1, 2)] if ordered else [BatchRun(topic, 5, 7)])


def test_a_replay_takes_the_hop_parts_where_its_engine_ran_them() -> None:
    """An ordered batch runs once on its senders' parts in sender order; an unordered part
    runs alone; a partition's own TEs keep what they send to the hop, which the engines
    owning its keys run. Here the partition ran customer 1's batch, then two of `tally`'s
    batches for item 7, one with a part from another engine."""
    topic = AppTopics("sales").hop("tally")
    parts = [Part(1, 1, 0, [order_event(2, 2, 7, 5)]), Part(1, 0, 1, [order_event(1, 1, 7, 3)]),
             Part(2, 1, 2, []), Part(2, 0, 3, [order_event(4, 1, 7, 2)])]  # fmt: skip
    ordered = hop_input("tally", True, parts)
    assert [(n, [t["seq"] for t in h.tuples]) for n, h in ordered.runs.items()] == [
        (1, [1, 2]),  # sender 0's part first, though it came second
        (2, [4]),
    ]
    unordered = hop_input("tally", False, parts)
    assert sorted(unordered.runs) == [0, 1, 3], "by offset; the mark ran nothing"
    events = [order_event(1, 1, 7, 3), order_event(4, 1, 7, 2)]
    order = [BatchRun("sales_events", 1, 1), BatchRun(topic, 1, 2)]
    ran = list(ran_in_order(order, {"sales_events": {1: events}}, {}, {topic: ordered}))
    assert [(s, n) for s, n, _ in ran] == [("sales_events", 1), (topic, 1), (topic, 2)]
    tester = _replay(sales(), Settings(), ran)
    assert tester.table("customer_sales") == {(1,): {"orders": 2, "units": 5}}
    assert tester.table("item_sales") == {(7,): {"orders": 3, "units": 10}}, "parts only"
    with pytest.raises(Unverifiable, match="offset 2 ran a part of 'tally'"):
        list(ran_in_order([BatchRun(topic, 1, 2)], {}, {}, {topic: unordered}))
