"""Aggregation constraints (WiSer): a bound on a sum or a count over many rows of a table,
which may live on every partition, e.g. `sum(qty) >= 0 group by item` over an item's stock
at all sites, or `count(*) <= 3 group by customer` over a customer's open orders.

No partition can check such a bound alone, so it is checked where every change to the sum
passes in one order: the SERIALIZE step of promised (BASIC) transactions, which adds each
one's deltas to running totals and aborts one that would cross the bound. That holds only
if the sum changes in no other way, so outside BASIC a transaction may not change a
summed field (a new row starts it at 0, a deleted row must hold 0), nor create or delete a
counted row; and nowhere may a row move to another group. See `engine/promises.py` and
`docs/consistency.md`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from txstream.model.errors import DataflowError

_SYNTAX = re.compile(
    r"^\s*(?:sum\(\s*(?P<field>\w+)\s*\)|(?P<count>count\(\s*\*\s*\)))\s*"
    r"(?P<op>>=|<=)\s*(?P<bound>-?\d+(?:\.\d+)?)\s*"
    r"(?:group\s+by\s+(?P<by>\w+(?:\s*,\s*\w+)*))?\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AggregateConstraint:
    table: str
    text: str  # as declared: its name in every message
    field: str  # summed; "" for count(*)
    op: str  # ">=" or "<="
    bound: float
    group_by: tuple[str, ...] = ()

    @property
    def counts(self) -> bool:
        return not self.field

    def contribution(self, row: dict[str, Any] | None) -> tuple[str, float] | None:
        """What a row adds to a total: (its total's key, amount); None for no row."""
        if row is None:
            return None
        amount = 1 if self.counts else row.get(self.field, 0)
        return self.total_key(self.group_of(row)), amount

    def allows(self, total: float) -> bool:
        return total >= self.bound if self.op == ">=" else total <= self.bound

    def group_of(self, row: dict[str, Any]) -> list[Any]:
        """The group a row counts in: its group-by fields' values."""
        try:
            return [row[f] for f in self.group_by]
        except KeyError as e:
            raise KeyError(f"{self.text}: the row of table {self.table!r} has no field {e}") from e

    def total_key(self, group: list[Any]) -> str:
        """One running total's name, stable across processes (JSON)."""
        return json.dumps([self.table, self.text, group])


def parse(table: str, text: str) -> AggregateConstraint:
    """`sum(FIELD) >= N [group by F1, F2]` or `count(*) <= N [...]` (either with >= or
    <=); a bad one names itself."""
    m = _SYNTAX.match(text)
    if m is None:
        raise DataflowError(
            f"table {table!r}: aggregation constraint {text!r} is not of the form "
            "'sum(FIELD) >= N group by F1, F2' or 'count(*) <= N group by F1' (>= or <=; "
            "the group by is optional)"
        )
    by = tuple(f.strip() for f in m["by"].split(",")) if m["by"] else ()
    field = m["field"] or ""
    if field in by:
        raise DataflowError(f"table {table!r}: {text!r} groups by the field it sums, {field!r}")
    return AggregateConstraint(table, text.strip(), field, m["op"], float(m["bound"]), by)
