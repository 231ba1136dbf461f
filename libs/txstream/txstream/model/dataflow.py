"""A validated dataflow: the DAG of procedures over streams, with its execution order."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter

from txstream.model import names
from txstream.model.declarations import (
    Declarations,
    Isolation,
    NestedTransaction,
    Procedure,
    Touches,
)
from txstream.model.errors import DataflowError


@dataclass(frozen=True)
class Dataflow:
    decl: Declarations
    order: tuple[str, ...]
    producers: Mapping[str, str]
    consumers: Mapping[str, tuple[Procedure, ...]]
    nested_of: Mapping[str, NestedTransaction]

    @property
    def spanning_streams(self) -> tuple[str, ...]:
        """Border streams read by a spanning procedure, or by the root of a spanning nested
        transaction: each batch goes to the partitions owning a key it declares."""
        return tuple(
            p.input for p in self.decl.procedures.values() if self.touches(p.name) is not None
        )

    def touches(self, procedure: str) -> Touches | None:
        """What a batch of `procedure`'s input declares, if it runs across engines: its own
        `touches`, or, for the root of a spanning nested transaction, the transaction's."""
        proc = self.decl.procedures[procedure]
        if proc.touches is not None:
            return proc.touches
        nested = self._spanning_root_of(procedure)
        return None if nested is None else nested.touches

    def isolation(self, procedure: str) -> tuple[Isolation, int]:
        """The level and epoch a spanning procedure's batches run at: its own, or for the
        root of a spanning nested transaction, the transaction's."""
        proc = self.decl.procedures[procedure]
        nested = self._spanning_root_of(procedure) if proc.touches is None else None
        if nested is not None:
            return nested.isolation, nested.epoch
        return proc.isolation, proc.epoch

    def _spanning_root_of(self, procedure: str) -> NestedTransaction | None:
        """The spanning nested transaction `procedure` is the root of, if any."""
        nested = self.nested_of.get(procedure)
        if nested is not None and nested.touches is not None and nested.procedures[0] == procedure:
            return nested
        return None

    @property
    def hops(self) -> tuple[str, ...]:
        """Repartitioned procedures: each reads its input through a topic of its own."""
        return tuple(p.name for p in self.decl.procedures.values() if p.repartitioned)

    def chain_start(self, name: str) -> Procedure:
        """The first procedure, on the sending engine, of the chain that makes repartitioned
        procedure `name`'s input: one reading a border stream, or a repartitioned one."""
        return _chain_start(self.decl, self.producers, self.procedure(name))

    @property
    def border_streams(self) -> tuple[str, ...]:
        """Streams read by procedures but made by none: the dataflow's inputs from outside."""
        return tuple(
            s for s in self.decl.streams if s in self.consumers and s not in self.producers
        )

    def procedure(self, name: str) -> Procedure:
        return self.decl.procedures[name]


def build_dataflow(decl: Declarations) -> Dataflow:
    """Validate the declarations, naming the offending declaration in every error."""
    producers: dict[str, str] = {}
    consumers: dict[str, list[str]] = {}
    for proc in decl.procedures.values():
        _check_known(decl, proc)
        consumers.setdefault(proc.input, []).append(proc.name)
        for out in proc.outputs:
            if out in producers:
                raise DataflowError(
                    f"stream {out!r} has two producers: {producers[out]!r} and {proc.name!r}"
                )
            producers[out] = proc.name
    _check_windows(decl)
    named = names.problems(decl)
    if named:
        raise DataflowError("; ".join(named))
    _check_spanning(decl, producers, consumers)
    order = _topological_order(decl, producers)
    _check_hops(decl, producers)  # walks the graph: after the cycle check
    rank = {name: i for i, name in enumerate(order)}
    nested_of = _nested_index(decl, rank, producers)
    _check_spanning_nested(decl, producers, consumers, nested_of)
    dataflow = Dataflow(
        decl=decl,
        order=order,
        producers=producers,
        consumers={
            s: tuple(decl.procedures[p] for p in sorted(ps, key=rank.__getitem__))
            for s, ps in consumers.items()
        },
        nested_of=nested_of,
    )
    spanning = dataflow.spanning_streams
    below = [s for s in spanning if dataflow.isolation(dataflow.consumers[s][0].name)[0].epochs]
    if len(spanning) > 1 and below:
        raise DataflowError(
            f"streams {', '.join(map(repr, spanning))} are read by spanning procedures, and "
            f"{below[0]!r} runs below PL3: with more than one spanning stream every one runs "
            "at PL3 or PL4 (an epoch's reads are kept per stream, so two streams in one "
            "epoch would each read the other's writes as of a different start)"
        )
    return dataflow


def _check_known(decl: Declarations, proc: Procedure) -> None:
    if proc.input not in decl.streams:
        raise DataflowError(f"procedure {proc.name!r} reads undeclared stream {proc.input!r}")
    for out in proc.outputs:
        if out not in decl.streams:
            raise DataflowError(f"procedure {proc.name!r} writes undeclared stream {out!r}")
        if out == proc.input:
            raise DataflowError(f"procedure {proc.name!r} reads and writes stream {out!r}")
    for w in proc.windows:
        if w not in decl.windows:
            raise DataflowError(f"procedure {proc.name!r} uses undeclared window {w!r}")


def _check_windows(decl: Declarations) -> None:
    """A window belongs to exactly one procedure: its state is that procedure's alone."""
    owners: dict[str, str] = {}
    for proc in decl.procedures.values():
        for w in proc.windows:
            if w in owners:
                raise DataflowError(
                    f"window {w!r} is owned by procedure {owners[w]!r} and cannot also be "
                    f"used by {proc.name!r}"
                )
            owners[w] = proc.name
    for w, triggers in decl.slide_triggers.items():
        if w not in decl.windows:
            raise DataflowError(f"slide trigger on undeclared window {w!r}")
        if triggers and w not in owners:
            raise DataflowError(f"window {w!r} has a slide trigger but no owning procedure")


def _check_spanning(
    decl: Declarations, producers: Mapping[str, str], consumers: Mapping[str, list[str]]
) -> None:
    """A spanning procedure runs alone on a border stream, ends its dataflow, and owns no
    window: its batch is one transaction across engines, which nothing else may share."""
    for proc in decl.procedures.values():
        if not proc.spanning:
            if proc.isolation is not Isolation.PL4:
                raise DataflowError(
                    f"procedure {proc.name!r}: isolation {proc.isolation.value} needs touches= "
                    "(a level is chosen for a transaction across engines; a procedure on its "
                    "own partition is serializable already)"
                )
            continue
        where = f"spanning procedure {proc.name!r}"
        if proc.input in producers:
            raise DataflowError(f"{where}: its input {proc.input!r} must be a border stream")
        if len(consumers[proc.input]) > 1:
            raise DataflowError(f"{where}: it must be the only reader of {proc.input!r}")
        if proc.windows:
            raise DataflowError(f"{where}: it cannot own windows")
        for out in proc.outputs:
            if out in consumers:
                raise DataflowError(f"{where}: its output {out!r} cannot feed a procedure")
        if any(proc.name in nt.procedures for nt in decl.nested.values()):
            raise DataflowError(f"{where}: it cannot be part of a nested transaction")


def _check_hops(decl: Declarations, producers: Mapping[str, str]) -> None:
    """A repartitioned edge runs its procedure on another engine, in a transaction of its
    own: its input must come from a procedure (a border stream is placed by its producer),
    and it cannot share a transaction with anything."""
    for proc in decl.procedures.values():
        if proc.ordered and not proc.repartitioned:
            raise DataflowError(f"procedure {proc.name!r}: ordered= applies to partition_by=")
        if not proc.repartitioned:
            continue
        where = f"repartitioned procedure {proc.name!r}"
        by = proc.partition_by
        if not (callable(by) or (isinstance(by, str) and by)):
            raise DataflowError(f"{where}: partition_by must name a field or be a function")
        if proc.input not in producers:
            raise DataflowError(
                f"{where}: its input {proc.input!r} is a border stream, placed by its "
                "producer's key: partition_by applies to streams made by a procedure"
            )
        if any(proc.name in nt.procedures for nt in decl.nested.values()):
            raise DataflowError(f"{where}: it cannot be part of a nested transaction")
        if proc.ordered:
            _check_ordered_entry(decl, producers, proc)


def _check_ordered_entry(decl: Declarations, producers: Mapping[str, str], hop: Procedure) -> None:
    """An ordered hop behind another hop needs that one ordered too: only an ordered inbox
    knows when it has passed a batch."""
    proc = _chain_start(decl, producers, hop)
    if proc.repartitioned and not proc.ordered:
        raise DataflowError(
            f"repartitioned procedure {hop.name!r} is ordered, but runs behind {proc.name!r}, "
            "which is not: order it too"
        )


def _chain_start(decl: Declarations, producers: Mapping[str, str], hop: Procedure) -> Procedure:
    """The first procedure, on the engine that makes `hop`'s input, of the chain that makes
    it: one reading a border stream, or a repartitioned one."""
    proc = decl.procedures[producers[hop.input]]
    while not proc.repartitioned and proc.input in producers:
        proc = decl.procedures[producers[proc.input]]
    return proc


def _check_spanning_nested(
    decl: Declarations,
    producers: Mapping[str, str],
    consumers: Mapping[str, list[str]],
    nested_of: Mapping[str, NestedTransaction],
) -> None:
    """A spanning nested transaction is one spanning unit: its root alone reads a border
    stream, its members own no window and declare nothing of their own, and what they emit
    feeds no procedure outside it (that one would run on one engine only). A member with
    touches= of its own is a spanning procedure, which `_check_spanning` keeps out."""
    for nt in decl.nested.values():
        if nt.touches is None:
            if nt.isolation is not Isolation.PL4:
                raise DataflowError(
                    f"nested transaction {nt.name!r}: isolation {nt.isolation.value} needs "
                    "touches= (a level is chosen for a transaction across engines)"
                )
            continue
        root, *_ = nested_of[nt.procedures[0]].procedures
        where = f"spanning nested transaction {nt.name!r}"
        head = decl.procedures[root]
        if head.input in producers:
            raise DataflowError(f"{where}: its root {root!r} must read a border stream")
        if len(consumers[head.input]) > 1:
            raise DataflowError(f"{where}: its root {root!r} must be the only reader of "
                                f"{head.input!r}")  # fmt: skip
        for name in nt.procedures:
            proc = decl.procedures[name]
            if proc.windows:
                raise DataflowError(f"{where}: member {name!r} cannot own windows")
            for out in proc.outputs:
                outside = [c for c in consumers.get(out, []) if c not in nt.procedures]
                if outside:
                    raise DataflowError(
                        f"{where}: {name!r}'s output {out!r} feeds {outside[0]!r}, outside it"
                    )


def _topological_order(decl: Declarations, producers: Mapping[str, str]) -> tuple[str, ...]:
    graph = {
        p.name: {producers[p.input]} if p.input in producers else set()
        for p in decl.procedures.values()
    }
    try:
        return tuple(TopologicalSorter(graph).static_order())
    except CycleError as e:
        cycle = " -> ".join(e.args[1])
        raise DataflowError(f"dataflow has a cycle: {cycle}") from e


def _nested_index(
    decl: Declarations, rank: Mapping[str, int], producers: Mapping[str, str]
) -> dict[str, NestedTransaction]:
    index: dict[str, NestedTransaction] = {}
    for nt in decl.nested.values():
        if not nt.procedures:
            raise DataflowError(f"nested transaction {nt.name!r} has no procedures")
        for p in nt.procedures:
            if p not in decl.procedures:
                raise DataflowError(f"nested transaction {nt.name!r} names unknown procedure {p!r}")
            if p in index:
                raise DataflowError(
                    f"procedure {p!r} is in two nested transactions: "
                    f"{index[p].name!r} and {nt.name!r}"
                )
            in_order = tuple(sorted(nt.procedures, key=rank.__getitem__))
            index[p] = dataclasses.replace(nt, procedures=in_order)
        root, *rest = index[nt.procedures[0]].procedures
        members = set(nt.procedures)
        for p in rest:
            made_by = producers.get(decl.procedures[p].input)
            if made_by not in members:
                raise DataflowError(
                    f"nested transaction {nt.name!r}: {p!r} is not triggered from within the "
                    f"group (its input is not made by {root!r} or another member)"
                )
    return index
