"""Repartitioned procedures on the receiving side: parts of batches from other engines.

A repartitioned procedure's input is routed by key with the producing TE's outputs
(`hops.hop_batches`); each engine receives the parts that its keys own. An unordered hop
runs each part as it comes; an ordered hop's parts wait in its inbox (`HopInbox`) until
their batch is whole, and run as one TE. With each group this engine marks how far it has
come on every ordered hop it feeds, so the receivers know when a batch is whole. What ran
goes into the group's order, for `txstream verify`: an unordered part by its offset in the
hop's topic, an ordered batch by its id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from txstream.engine.executor import TeExecutor
from txstream.engine.group import OutputBatch, Source, last_batch_key
from txstream.engine.hops import HopInbox, marker_key
from txstream.engine.ledger import BatchLedger
from txstream.model.dataflow import Dataflow
from txstream.model.declarations import Record


@final
class HopRouter:
    def __init__(
        self, dataflow: Dataflow, ledger: BatchLedger, executor: TeExecutor, partitions: int
    ) -> None:
        """`partitions` is the number of engines, which ordered hops hear from."""
        self.dataflow = dataflow
        self.ledger = ledger
        self.executor = executor
        self.partitions = partitions
        hops = tuple(dataflow.decl.procedures[p] for p in dataflow.hops)
        self.inboxes = {
            h.name: HopInbox(h.name, partitions, ledger.sys_value, ledger.set_sys)
            for h in hops
            if h.ordered
        }
        # ordered hops fed from here: the progress they follow (an inbox, or a border stream)
        self._marked = [(h, dataflow.chain_start(h.name)) for h in hops if h.ordered]

    def receive(
        self,
        procedure: str,
        sender: int,
        batch_id: int,
        tuples: Sequence[Record],
        source: Source,
    ) -> None:
        """A record of repartitioned `procedure`'s topic, read at `source`: engine
        `sender`'s part of batch `batch_id`, or (no tuples) its progress marker. A part is
        one TE, whose effects commit with the topic's next offset; the senders'
        transactions put each part there exactly once, so no batch id needs checking. An
        ordered hop's parts run once their batch is whole, and the position stays at the
        oldest waiting one."""
        inbox = self.inboxes.get(procedure)
        ledger = self.ledger
        if inbox is None:
            if tuples:
                self.run(procedure, batch_id, tuples)
                ledger.ran(source[0], source[2], by_offset=True)
            ledger.local()
            ledger.advance(source)
            return
        ledger.local()
        inbox.receive(sender, batch_id, tuples, source[2])
        for ready, parts in inbox.ready():
            self.run(procedure, ready, [t for part in parts for t in part.tuples])
            ledger.ran(source[0], ready, by_offset=False)
        position = inbox.position()
        if position is not None:
            ledger.set_position(source[0], position)
        frontier = inbox.frontier()
        if frontier is not None:  # the commit notice says how far: every part up to it ran
            stream = self.dataflow.decl.procedures[procedure].input
            ledger.group.first_batch_ids.setdefault(stream, frontier)
            ledger.group.last_batch_ids[stream] = frontier

    def run(self, procedure: str, batch_id: int, tuples: Sequence[Record]) -> None:
        """Repartitioned `procedure` as one TE: on an unordered part, or on an ordered
        batch's parts in sender order."""
        proc = self.dataflow.decl.procedures[procedure]
        self.ledger.local()
        self.executor.run(proc, proc.input, batch_id, tuples)
        self.ledger.group.stats.batches += 1

    def mark_progress(self) -> None:
        """Tell every engine's inbox of each ordered hop fed from here how far this engine
        has come, with the group, after its parts: a marker (a part with no tuples)."""
        ledger = self.ledger
        for hop, start in self._marked:
            if start.repartitioned:
                passed = self.inboxes[start.name].frontier()
            else:
                passed = ledger.sys_value(last_batch_key(start.input, ledger.partition))
            key = marker_key(hop.name)
            sent = ledger.sys_value(key)
            if passed is None or (sent is not None and passed <= sent):
                continue
            ledger.set_sys(key, passed)
            ledger.group.outputs += [
                OutputBatch(hop.input, passed, [], hop=hop.name, partition=q)
                for q in range(self.partitions)
            ]
