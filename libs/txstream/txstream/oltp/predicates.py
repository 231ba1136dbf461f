"""Predicate queries: `field op value` conditions, all of which a row must meet.

On the command line a condition is written `balance<10` or `name=alice`; on the wire it
is a JSON list `[field, op, value]`, so the value keeps its type.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

from txstream.model.declarations import Record

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|!=|=|<|>)\s*(.+?)\s*$")

Condition = tuple[str, str, Any]


def parse_condition(text: str) -> Condition:
    """`balance<10` -> ("balance", "<", 10); a value that is not JSON is a string."""
    m = _CONDITION.match(text)
    if m is None:
        raise ValueError(
            f"condition {text!r} is not 'field op value' with op one of {', '.join(OPS)}"
        )
    field, op, raw = m.groups()
    if raw[0] in "<>=!":
        raise ValueError(f"condition {text!r}: the value {raw!r} starts with an operator")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return field, op, value


def conditions_of(text: str) -> list[Condition]:
    """The wire form back to conditions, with a clear error for a malformed one."""
    raw = json.loads(text)
    out: list[Condition] = []
    for c in raw:
        if not (isinstance(c, list) and len(c) == 3 and c[1] in OPS):
            raise ValueError(f"condition {c!r} is not [field, op, value] with a known op")
        out.append((str(c[0]), str(c[1]), c[2]))
    return out


def matches(row: Record, conditions: Sequence[Condition]) -> bool:
    for field, op, value in conditions:
        if field not in row:
            raise ValueError(f"rows have no field {field!r}; fields are {sorted(row)}")
        try:
            if not OPS[op](row[field], value):
                return False
        except TypeError as e:
            raise ValueError(f"cannot compare {field} = {row[field]!r} with {value!r}") from e
    return True


AGGREGATES = ("count", "sum", "min", "max")
Aggregate = tuple[str, str]  # (fn, field); field is ignored by count


def aggregates_of(text: str) -> list[Aggregate]:
    out: list[Aggregate] = []
    for a in json.loads(text):
        if not (isinstance(a, list) and len(a) == 2 and a[0] in AGGREGATES):
            raise ValueError(f"aggregate {a!r} is not [fn, field] with fn one of {AGGREGATES}")
        out.append((str(a[0]), str(a[1])))
    return out


def parse_aggregate(text: str) -> Aggregate:
    """`sum:balance` -> ("sum", "balance"); `count` -> ("count", "")."""
    fn, _, field = text.partition(":")
    if fn not in AGGREGATES or (fn != "count" and not field):
        raise ValueError(f"aggregate {text!r} is not count or fn:field with fn in {AGGREGATES}")
    return fn, field


def aggregate_name(a: Aggregate) -> str:
    return a[0] if a[0] == "count" else f"{a[0]}_{a[1]}"


def aggregate(rows: Sequence[Record], aggs: Sequence[Aggregate]) -> Record:
    """One partition's totals, which `combine` merges across partitions."""
    out: Record = {}
    for a in aggs:
        fn, field = a
        if fn == "count":
            out[aggregate_name(a)] = len(rows)
            continue
        missing = next((r for r in rows if field not in r), None)
        if missing is not None:
            raise ValueError(f"rows have no field {field!r}; fields are {sorted(missing)}")
        values = [r[field] for r in rows]
        try:
            if fn == "sum":
                out[aggregate_name(a)] = sum(values)
            else:
                out[aggregate_name(a)] = (min if fn == "min" else max)(values, default=None)
        except TypeError as e:
            raise ValueError(f"cannot {fn} field {field!r}: {e}") from e
    return out


def combine(parts: Sequence[Record], aggs: Sequence[Aggregate]) -> Record:
    out: Record = {}
    for a in aggs:
        name = aggregate_name(a)
        values = [p[name] for p in parts if p.get(name) is not None]
        if a[0] in ("count", "sum"):
            out[name] = sum(values)
        else:
            out[name] = (min if a[0] == "min" else max)(values, default=None)
    return out
