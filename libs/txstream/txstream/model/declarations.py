"""The declarations an application is made of. Plain data; the engine gives them behaviour."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from txstream.model.aggregates import AggregateConstraint
from txstream.model.signature import Signature
from txstream.model.windows import TimeWindowSpec, TupleWindowSpec

Record = dict[str, Any]
# The engine's `TxnContext`, seen from the model, which does not depend on the engine.
Context = Any
Key = tuple[int | str, ...]
ProcedureFn = Callable[[Context, Sequence[Record]], None]
TransactionFn = Callable[[Context, Record], Any]
Check = Callable[[Record], bool]
Touches = Callable[[Record], Iterable[tuple[str, Key | int | str]]]
# A repartitioned edge's new key: a field of the input tuple, or a function of the tuple.
PartitionBy = str | Callable[[Record], Key | int | str]


@dataclass(frozen=True)
class Stream:
    """An ordered, unbounded sequence of atomic batches of `schema` records."""

    name: str
    schema: str
    key_field: str | None = None


@dataclass(frozen=True)
class Constraint:
    """A per-key integrity rule checked on every write, e.g. balance >= 0."""

    name: str
    check: Check


@dataclass(frozen=True)
class Table:
    """Shared mutable state: key tuples to `schema` records, read and written by any TE."""

    name: str
    schema: str
    constraints: tuple[Constraint, ...] = ()
    # Names (and Avro primitive types) of the key's parts, for readers outside the engine
    # (a warehouse's columns); the engine itself needs none.
    key: tuple[tuple[str, str], ...] = ()
    # Bounds on sums over many rows, checked when promised transactions are serialized.
    aggregates: tuple[AggregateConstraint, ...] = ()


@dataclass(frozen=True)
class Window:
    """State owned by one procedure; tuples are staged until a slide makes them visible."""

    name: str
    schema: str
    spec: TupleWindowSpec | TimeWindowSpec
    owner: str = ""


@dataclass(frozen=True)
class SlideTrigger:
    """An EE trigger: runs inside the owning procedure's TE each time its window slides."""

    window: str
    fn: Callable[[Context], None]


class Isolation(StrEnum):
    """TSpoon's isolation levels for a transaction across engines (`docs/partitioning.md`).

    PL4 and PL3 run alike: in a deterministic engine the input order is already a serial
    order, so serializable costs what serializable-in-input-order does. PL2, PL1 and PL0
    run alike too, as read committed over epochs: every batch of an epoch (`epoch`
    consecutive batch ids) reads each key as it stood at the end of the epoch before,
    so the batches of one epoch exchange their reads without waiting for each other; each
    level is given at least what it promises."""

    PL0 = "PL0"
    PL1 = "PL1"
    PL2 = "PL2"
    PL3 = "PL3"
    PL4 = "PL4"

    @property
    def epochs(self) -> bool:
        """Whether batches read as of their epoch's start, not of the batch before them."""
        return self in (Isolation.PL0, Isolation.PL1, Isolation.PL2)

    @classmethod
    def parse(cls, value: str) -> Isolation:
        try:
            return cls(value.upper())
        except (ValueError, AttributeError):
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"isolation {value!r}: expected one of {names}") from None


DEFAULT_EPOCH = 16


@dataclass(frozen=True)
class Procedure:
    """A stored procedure: one run on one input batch is one transaction execution."""

    name: str
    fn: ProcedureFn
    input: str
    outputs: tuple[str, ...] = ()
    windows: tuple[str, ...] = ()
    # A spanning procedure's (table, key) pairs per input tuple (`engine.spanning`).
    touches: Touches | None = None
    # A repartitioned procedure reads its input, on the engine owning each tuple's new key,
    # through a Kafka topic of its own (`engine.hops`).
    partition_by: PartitionBy | None = None
    # An ordered hop runs once per batch, in batch-id order, not per part as they arrive.
    ordered: bool = False
    # A spanning procedure's level, and (below PL3) how many batch ids an epoch spans.
    isolation: Isolation = Isolation.PL4
    epoch: int = DEFAULT_EPOCH

    @property
    def spanning(self) -> bool:
        return self.touches is not None

    @property
    def repartitioned(self) -> bool:
        return self.partition_by is not None


@dataclass(frozen=True)
class Transaction:
    """A registered OLTP procedure: called with parameters, returns a JSON-able result.

    It runs in the partition engine that owns the key it was called with, between TEs.
    With a `signature`, calls whose parameters do not fit it never run."""

    name: str
    fn: TransactionFn
    signature: Signature | None = None

    def problem(self, params: object) -> str | None:
        """Why `params` cannot be this transaction's parameters, or None."""
        if self.signature is not None:
            return self.signature.problem(params)
        if not isinstance(params, dict):
            return f"parameters must be a JSON object, not {params!r}"
        return None


@dataclass(frozen=True)
class NestedTransaction:
    """Procedures that run per batch as one unit: nothing interleaves, all commit or none.
    With `touches` (over the root's input tuples, covering every member's keys) the unit
    spans partitions, as a spanning procedure does: a transactional subgraph at PL4."""

    name: str
    procedures: tuple[str, ...]
    touches: Touches | None = None
    isolation: Isolation = Isolation.PL4
    epoch: int = DEFAULT_EPOCH


def name_of(x: str | Stream | Table | Window | Procedure) -> str:
    """The name of a declaration, or the name itself."""
    return x if isinstance(x, str) else x.name


@dataclass
class Declarations:
    """Everything an App has declared, keyed by name."""

    streams: dict[str, Stream] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    windows: dict[str, Window] = field(default_factory=dict)
    procedures: dict[str, Procedure] = field(default_factory=dict)
    nested: dict[str, NestedTransaction] = field(default_factory=dict)
    transactions: dict[str, Transaction] = field(default_factory=dict)
    slide_triggers: dict[str, list[SlideTrigger]] = field(default_factory=dict)
    insert_triggers: dict[str, list[Callable[[Context, Record], None]]] = field(
        default_factory=dict
    )

    @property
    def serves_requests(self) -> bool:
        """Whether its engines take the coordinator's requests: OLTP transactions, or
        queries of its tables."""
        return bool(self.transactions or self.tables)

    @property
    def aggregates(self) -> list[AggregateConstraint]:
        """Every table's aggregation constraints: what SERIALIZE keeps totals of."""
        return [a for t in self.tables.values() for a in t.aggregates]


class RecoveryMode(StrEnum):
    """How the app recovers: from its changelog, or from a strong or weak command log."""

    CHANGELOG = "changelog"
    STRONG = "strong"
    WEAK = "weak"

    @property
    def logged(self) -> bool:
        return self is not RecoveryMode.CHANGELOG

    @classmethod
    def parse(cls, text: str) -> RecoveryMode:
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"recovery mode {text!r}: expected one of {names}") from None
