"""SERIALIZE's running totals: one per aggregation constraint and group, across partitions.

Every change to a constrained sum is a promised transaction's delta (`model.aggregates`),
so adding the deltas in the one order the coordinator reads them gives each sum exactly;
a transaction whose deltas would take one across its bound is aborted, and its deltas are
not added. The totals are durable in the coordinator's log: each serialized transaction's
deltas, and now and then all totals in one record, so the log can be truncated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from txstream.model.aggregates import AggregateConstraint


class Totals:
    def __init__(self, bounds: Iterable[AggregateConstraint]) -> None:
        self.bounds = {(a.table, a.text): a for a in bounds}
        self.values: dict[str, float] = {}
        self.changed = False  # since the last totals record

    def problem(self, deltas: list[list[Any]]) -> tuple[str, str] | None:
        """(reason, detail) if adding `deltas` would cross a bound, or names a constraint
        this app does not declare (a worker running another version of it)."""
        for key, delta in deltas:
            table, text, group = json.loads(key)
            bound = self.bounds.get((table, text))
            if bound is None:
                return "unknown_constraint", f"table {table!r} declares no constraint '{text}'"
            total = self.values.get(key, 0) + delta
            if not bound.allows(total):
                before = self.values.get(key, 0)
                return (
                    "aggregate_constraint",
                    f"'{text}' on table {table!r}, group {group}: {_num(before)} "
                    f"{'+' if delta >= 0 else '-'} {_num(abs(delta))} = {_num(total)}",
                )
        return None

    def add(self, deltas: list[list[Any]]) -> None:
        for key, delta in deltas:
            self.values[key] = self.values.get(key, 0) + delta
        self.changed = self.changed or bool(deltas)

    def dump(self) -> str:
        self.changed = False
        return json.dumps(self.values, sort_keys=True)

    def load(self, text: str) -> None:
        self.values = {k: v for k, v in json.loads(text).items()}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
