"""TPC-C's transactions on the engine (`apps/tpcc`), no Kafka: a New-Order takes stock and
writes its order, lines and new-order row; an unused item rolls it back whole; a Payment
moves money from the customer to the warehouse and district; Delivery charges the
customer the order's lines; Order-Status and Stock-Level read; and TPC-C's consistency
conditions hold after a mix of them."""

from __future__ import annotations

import json
from typing import Any

from bench.tpcc_bench import txstream_violations
from tests.support.fakes import MemoryBase
from tpcc.dataflow import build_app, price_of
from txstream.engine.partition_engine import PartitionEngine
from txstream.oltp.messages import EngineReply, EngineRequest, Fragment, TxnResult

W, ITEMS, CUSTOMERS = 1, 50, 5


def loaded() -> tuple[PartitionEngine, MemoryBase]:
    base = MemoryBase()
    engine = PartitionEngine(build_app().dataflow(), base, partition=0, params={})
    assert call(engine, "load_warehouse", w=W, items=ITEMS).ok
    for d in range(1, 11):
        assert call(engine, "load_customers", w=W, d=d, customers=CUSTOMERS).ok
    base.apply(engine.take_group())
    return engine, base


def call(engine: PartitionEngine, procedure: str, **params: Any) -> EngineReply:
    req = EngineRequest("1.1", 1, "run", "r", "out", [Fragment.call((W,), procedure, **params)])
    assert engine.participant.request(req)
    return engine.group.replies[-1]


def lines(*items: int, qty: int = 3) -> list[dict[str, int]]:
    return [{"i": i, "supply_w": W, "qty": qty} for i in items]


def test_a_new_order_writes_its_order_and_takes_stock() -> None:
    engine, base = loaded()
    r = call(engine, "new_order", w=W, d=2, c=3, lines=lines(4, 9))
    assert r.ok and json.loads(r.results) == [1]
    base.apply(engine.take_group())
    t = base.tables
    assert t["district"][(W, 2)]["next_o_id"] == 2
    assert t["orders"][(W, 2, 1)]["ol_cnt"] == 2 and (W, 2, 1) in t["new_order"]
    assert t["order_line"][(W, 2, 1, 2)]["amount"] == 3 * price_of(9)
    assert t["stock"][(W, 4)]["ytd"] == 3 and t["customer"][(W, 2, 3)]["last_o_id"] == 1


def test_an_unused_item_rolls_the_new_order_back_whole() -> None:
    engine, base = loaded()
    r = call(engine, "new_order", w=W, d=2, c=3, lines=lines(4, ITEMS + 1))
    assert (r.ok, r.reason) == (False, "unused_item")
    base.apply(engine.take_group())
    assert base.tables["district"][(W, 2)]["next_o_id"] == 1
    assert "orders" not in base.tables or not base.tables["orders"]


def test_payment_delivery_and_the_reads() -> None:
    engine, base = loaded()
    call(engine, "new_order", w=W, d=1, c=2, lines=lines(1, 2, 3, qty=1))
    assert call(engine, "pay_home", w=W, d=1, amount=500).ok
    assert call(engine, "pay_customer", w=W, d=1, c=2, amount=500).ok
    status = json.loads(call(engine, "order_status", w=W, d=1, c=2).results)[0]
    assert status == {"balance": -1500, "o_id": 1, "lines": 3}
    assert json.loads(call(engine, "delivery", w=W, carrier=7).results) == [1]
    base.apply(engine.take_group())
    t = base.tables
    charged = sum(price_of(i) for i in (1, 2, 3))
    assert t["customer"][(W, 1, 2)]["balance"] == -1500 + charged
    assert t["orders"][(W, 1, 1)]["carrier_id"] == 7 and not t["new_order"]
    assert t["history"][(W, 1, 2, 2)]["amount"] == 500
    low = json.loads(call(engine, "stock_level", w=W, d=1, threshold=100).results)[0]
    assert low == 3  # every item of the last order: stock starts below 101


def test_the_consistency_conditions_hold_after_a_mix() -> None:
    engine, base = loaded()
    for n in range(30):
        d, c = 1 + n % 10, 1 + n % CUSTOMERS
        call(engine, "new_order", w=W, d=d, c=c, lines=lines(1 + n % ITEMS, 2 + n % ITEMS))
        call(engine, "pay_home", w=W, d=d, amount=100 + n)
        if n % 7 == 0:
            call(engine, "delivery", w=W, carrier=1 + n % 10)
    base.apply(engine.take_group())
    t = base.tables
    assert t["warehouse"][(W,)]["ytd"] == sum(r["ytd"] for r in t["district"].values())
    for d in range(1, 11):
        orders = [int(k[2]) for k in t["orders"] if k[1] == d]
        new = [int(k[2]) for k in t["new_order"] if k[1] == d]
        assert t["district"][(W, d)]["next_o_id"] - 1 == max(orders)
        assert not new or max(new) - min(new) + 1 == len(new)
        lines_here = [k for k in t["order_line"] if k[1] == d]
        assert sum(r["ol_cnt"] for k, r in t["orders"].items() if k[1] == d) == len(lines_here)


class Answers:
    """A client whose queries answer from fixed totals: what `txstream_violations` reads."""

    def __init__(self, district_ytd: int) -> None:
        self.district_ytd = district_ytd

    def query(self, table: str, where: Any, aggregates: Any, **_: Any) -> TxnResult:
        names = {f"{fn}_{f}" if fn != "count" else "count": 0 for fn, f in aggregates}
        if table == "warehouse":
            names["sum_ytd"] = 500
        elif table == "district":
            names.update(sum_ytd=self.district_ytd, max_next_o_id=3)
        elif table == "orders":
            names.update(max_o_id=2, sum_ol_cnt=10)
        elif table == "order_line":
            names["count"] = 10
        return TxnResult("r", "t", "committed", rows=json.dumps([[["*"], names]]))


def test_the_txstream_side_s_checks_find_a_broken_condition() -> None:
    assert txstream_violations(Answers(500), 1) == []  # type: ignore[arg-type]
    assert txstream_violations(Answers(499), 1) == ["W_YTD = sum(D_YTD)"]  # type: ignore[arg-type]
