"""Request validation: why a client's request cannot run (None when it can), checked before
any engine sees it, so a bad request fails at once naming its bad input instead of on a
partition: the timeout, the query's table, isolation, aggregates and key, or each
fragment's transaction, key and parameters against its declared signature."""

from __future__ import annotations

import json
from collections.abc import Mapping, Set

from txstream.model.declarations import Transaction
from txstream.oltp.messages import ISOLATIONS, TxnRequest, key_of
from txstream.oltp.predicates import aggregates_of


def invalid(
    req: TxnRequest, transactions: Mapping[str, Transaction], tables: Set[str]
) -> str | None:
    """Why `req` cannot run; `tables` empty means any table name is taken."""
    if req.timeout_ms <= 0:
        return f"timeout_ms must be positive, not {req.timeout_ms}"
    if req.query is not None:
        if req.fragments:
            return "a request is a query or a transaction, not both"
        if tables and req.query.table not in tables:
            return f"no table {req.query.table!r}; tables are {sorted(tables)}"
        if req.query.isolation not in ISOLATIONS:
            given = req.query.isolation
            return f"isolation must be one of {', '.join(ISOLATIONS)}, not {given!r}"
        try:
            aggregates_of(req.query.aggregates)
        except ValueError as e:
            return str(e)
        return _bad_key(req.query.key) if req.query.key is not None else None
    if not req.fragments:
        return "a transaction needs at least one fragment"
    for f in req.fragments:
        tx = transactions.get(f.procedure)
        if tx is None:
            return f"no transaction {f.procedure!r}; registered: {sorted(transactions)}"
        bad = _bad_key(f.key) or _bad_params(f.params, tx)
        if bad is not None:
            return f"fragment {f.procedure}: {bad}"
    return None


def _bad_key(text: str) -> str | None:
    try:
        key_of(text)
    except ValueError as e:
        return str(e)
    return None


def _bad_params(text: str, tx: Transaction) -> str | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return f"params are not JSON: {e}"
    return tx.problem(value)
