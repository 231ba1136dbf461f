"""The result document, read back from what the engines committed.

Counts and the outcomes digest come from the committed `order_outcomes` batches (each
outcome once: the leader of its batch emitted it); stock, sold and balances from the
committed changelog of every partition, read to its committed end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from orders.result import CANCEL_REASONS, CONFIRMED, Result, outcomes_sha256
from txstream.config import Settings
from txstream.kafka.read import read_to_committed_end
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.declarations import Record
from txstream.recovery.changelog import committed_tables
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.state.codec import StateCodec


class ResultError(RuntimeError):
    """The committed output is not a whole, single run's: an outcome twice or missing."""


def from_outcomes(
    outcomes: Iterable[Record], tables: Mapping[str, Mapping[Any, Record]], events: int
) -> Result:
    """Counts and digest from the outcomes; stock, sold, balances from the tables."""
    by_seq: dict[int, Record] = {}
    for o in outcomes:
        if o["seq"] in by_seq:
            raise ResultError(f"event {o['seq']} has two committed outcomes")
        by_seq[o["seq"]] = o
    missing = [s for s in range(events) if s not in by_seq]
    if missing:
        raise ResultError(f"{len(missing)} events have no committed outcome (first: {missing[0]})")
    result = Result()
    ordered = [by_seq[s] for s in range(events)]
    for o in ordered:
        outcome = o["outcome"]
        if outcome == CONFIRMED:
            result.confirmed += 1
            result.revenue += o["revenue"]
        elif outcome in CANCEL_REASONS:
            result.cancelled[outcome] += 1
        elif outcome in result.rejected_events:
            result.rejected_events[outcome] += 1
    result.outcomes_sha256 = outcomes_sha256(
        (o["order_id"], o["outcome"]) for o in ordered if o["kind"] == "O"
    )
    for (item,), row in tables.get("items", {}).items():
        result.stock[int(item)], result.sold[int(item)] = row["stock"], row["sold"]
    for (customer,), row in tables.get("accounts", {}).items():
        result.balances[int(customer)] = row["balance"]
    return result


def committed_result(
    settings: Settings,
    app: App,
    partitions: int,
    events: int,
    progress: Callable[[str], None] = lambda what: None,
) -> Result:
    topics = AppTopics(app.name)
    registry = SchemaRegistry(settings.schema_dir)
    outcome_codec = BatchCodec(registry.get(app.decl.streams["order_outcomes"].schema))
    outcomes: list[Record] = []
    for p in range(partitions):
        progress(f"reading partition {p}'s outcomes")
        for msg in read_to_committed_end(settings, topics.stream("order_outcomes"), p):
            outcomes.extend(outcome_codec.decode(msg.value() or b"").tuples)
    progress("reading the changelogs")
    codec = StateCodec(app.dataflow(), registry)
    tables = committed_tables(settings, codec, topics.changelog, partitions)
    return from_outcomes(outcomes, tables, events)
