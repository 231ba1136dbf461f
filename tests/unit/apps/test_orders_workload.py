"""The order pipeline's input files, serial reference and result document."""

from __future__ import annotations

from pathlib import Path

import pytest

from orders.files import Event, InputError, Order, Restock, Shop, TopUp, batches, read_events
from orders.gen import generate
from orders.reference import invariants, run
from orders.result import outcomes_sha256


def write(tmp: Path, items: str, customers: str, events: str) -> Shop:
    (tmp / "i").write_text(items)
    (tmp / "c").write_text(customers)
    (tmp / "e").write_text(events)
    return Shop.read(tmp / "i", tmp / "c", tmp / "e")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("O 1 2 3", "expected 4 fields"),
        ("O 1 2 x 4", "'x' is not an integer"),
        ("X 1 2", "unknown event 'X'"),
        ("R 1", "expected 2 fields"),
        ("T 1 99999999999999999999", "does not fit a 64-bit integer"),
        ("O -1 2 3 4", "ids must be >= 0"),
    ],
)
def test_a_bad_event_line_is_named(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "events.txt"
    path.write_text(f"R 1 5\n\n{line}\n")
    with pytest.raises(InputError, match=f"{path}:3: .*{says}"):
        read_events(path)


def test_events_parse_in_order_with_any_quantity(tmp_path: Path) -> None:
    path = tmp_path / "events.txt"
    path.write_text("O 7 1 2 -3\nR 2 0\nT 1 -5\n")
    assert read_events(path) == [Order(7, 1, 2, -3), Restock(2, 0), TopUp(1, -5)]


def test_batches_are_consecutive_lines() -> None:
    events: list[Event] = [Restock(i, 1) for i in range(5)]
    assert batches(events, 2) == [events[0:2], events[2:4], events[4:5]]


def test_every_outcome_of_the_semantics(tmp_path: Path) -> None:
    shop = write(
        tmp_path,
        "1 10 2\n2 5 0\n",
        "1 25\n2 100\n",
        "\n".join(
            [
                "O 1 1 1 2",  # 20 <= 25: confirmed; stock 1 -> 0, balance 25 -> 5
                "O 1 2 1 1",  # order id seen: duplicate (even with another customer)
                "O 2 9 1 1",  # unknown customer: invalid
                "O 3 1 1 0",  # qty 0: invalid
                "O 4 2 1 1",  # stock 0: out_of_stock
                "R 1 3",  # stock 0 -> 3
                "O 5 1 1 1",  # 10 > 5: insufficient_funds, stock stays 3
                "T 1 15",  # balance 5 -> 20
                "O 6 1 1 2",  # 20 <= 20: confirmed; stock 3 -> 1, balance 0
                "R 9 1",  # unknown item: invalid_restock
                "T 2 0",  # amount 0: invalid_topup
            ]
        ),
    )
    doc = run(shop).to_json()
    assert doc["confirmed"] == 2
    assert doc["cancelled"] == {"duplicate_order": 1, "invalid": 2, "out_of_stock": 1,
                                "insufficient_funds": 1}  # fmt: skip
    assert doc["rejected_events"] == {"invalid_restock": 1, "invalid_topup": 1}
    assert doc["revenue"] == 40
    assert doc["stock"] == {"1": 1, "2": 0}
    assert doc["sold"] == {"1": 4, "2": 0}
    assert doc["balances"] == {"1": 0, "2": 100}
    lines = [(1, "confirmed"), (1, "duplicate_order"), (2, "invalid"), (3, "invalid"),
             (4, "out_of_stock"), (5, "insufficient_funds"), (6, "confirmed")]  # fmt: skip
    assert doc["outcomes_sha256"] == outcomes_sha256(lines)


def test_a_catalogue_line_out_of_range_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"/i:2: need item_id >= 0, price > 0"):
        write(tmp_path, "1 10 2\n2 0 1\n", "1 5\n", "")


def test_the_reference_holds_the_invariants_and_a_broken_result_is_named(tmp_path: Path) -> None:
    generate(items=20, customers=40, events=3000, seed=5, out=tmp_path)
    shop = Shop.read(tmp_path / "items.txt", tmp_path / "customers.txt", tmp_path / "events.txt")
    result = run(shop)
    assert invariants(shop, result) == []
    restocked = result.stock[3] + result.sold[3] - shop.items[3].stock
    result.stock[3] -= 1  # a unit lost
    result.revenue += 1
    result.cancelled["invalid"] += 1
    assert invariants(shop, result) == [
        f"item 3: stock {result.stock[3]} + sold {result.sold[3]} != initial "
        f"{shop.items[3].stock} + restocked {restocked}",
        f"revenue {result.revenue} != {result.revenue - 1}, the worth of the items sold",
        f"{result.confirmed + sum(result.cancelled.values())} orders confirmed or cancelled, "
        f"of {result.confirmed + sum(result.cancelled.values()) - 1} in the input",
    ]
