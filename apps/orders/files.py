"""The workload's three input files, parsed whole before anything is loaded.

A line that does not parse stops the run with an error naming the file and line: a
half-loaded shop would give a result nobody asked for. Values must fit Kafka's and Avro's
64-bit integers, since every stage carries them; the error says so rather than overflowing
later inside a worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class InputError(ValueError):
    """A line of an input file that does not parse; the message names file and line."""


@dataclass(frozen=True, slots=True)
class Item:
    item: int
    price: int
    stock: int


@dataclass(frozen=True, slots=True)
class Customer:
    customer: int
    balance: int


@dataclass(frozen=True, slots=True)
class Order:
    order_id: int
    customer: int
    item: int
    qty: int


@dataclass(frozen=True, slots=True)
class Restock:
    item: int
    qty: int


@dataclass(frozen=True, slots=True)
class TopUp:
    customer: int
    amount: int


Event = Order | Restock | TopUp

# letter -> (event class, field count after the letter)
_EVENTS: dict[str, tuple[type[Order] | type[Restock] | type[TopUp], int]] = {
    "O": (Order, 4),
    "R": (Restock, 2),
    "T": (TopUp, 2),
}


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Each non-blank line's number and fields."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from e
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if fields:
            yield number, fields


def _ints(path: Path, number: int, fields: list[str], expected: int) -> list[int]:
    where = f"{path}:{number}"
    if len(fields) != expected:
        raise InputError(f"{where}: expected {expected} fields, found {len(fields)}: {fields!r}")
    values = []
    for field in fields:
        try:
            value = int(field)
        except ValueError:
            raise InputError(f"{where}: {field!r} is not an integer") from None
        if not INT64_MIN <= value <= INT64_MAX:
            raise InputError(f"{where}: {field} does not fit a 64-bit integer")
        values.append(value)
    return values


def read_items(path: Path) -> dict[int, Item]:
    items: dict[int, Item] = {}
    for number, fields in _lines(path):
        item, price, stock = _ints(path, number, fields, 3)
        if item < 0 or price <= 0 or stock < 0:
            raise InputError(
                f"{path}:{number}: need item_id >= 0, price > 0, stock >= 0: {fields!r}"
            )
        if item in items:
            raise InputError(f"{path}:{number}: item {item} listed twice")
        items[item] = Item(item, price, stock)
    return items


def read_customers(path: Path) -> dict[int, Customer]:
    customers: dict[int, Customer] = {}
    for number, fields in _lines(path):
        customer, balance = _ints(path, number, fields, 2)
        if customer < 0 or balance < 0:
            raise InputError(f"{path}:{number}: need customer_id >= 0, balance >= 0: {fields!r}")
        if customer in customers:
            raise InputError(f"{path}:{number}: customer {customer} listed twice")
        customers[customer] = Customer(customer, balance)
    return customers


def read_events(path: Path) -> list[Event]:
    events: list[Event] = []
    for number, fields in _lines(path):
        letter, rest = fields[0], fields[1:]
        if letter not in _EVENTS:
            raise InputError(f"{path}:{number}: unknown event {letter!r} (expected O, R or T)")
        kind, count = _EVENTS[letter]
        values = _ints(path, number, rest, count)
        ids = values[:3] if kind is Order else values[:1]
        if min(ids) < 0:
            raise InputError(f"{path}:{number}: ids must be >= 0: {fields!r}")
        events.append(kind(*values))
    return events


@dataclass(frozen=True)
class Shop:
    """The three files, parsed."""

    items: dict[int, Item]
    customers: dict[int, Customer]
    events: list[Event]

    @classmethod
    def read(cls, items: Path, customers: Path, events: Path) -> Shop:
        return cls(read_items(items), read_customers(customers), read_events(events))


def batches(events: list[Event], size: int) -> list[list[Event]]:
    """Batch b (1-based) is events (b-1)*size .. b*size-1."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    return [events[i : i + size] for i in range(0, len(events), size)]
