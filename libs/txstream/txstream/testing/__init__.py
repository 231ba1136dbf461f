"""Test an app's stored procedures with no broker: the real partition engine, in memory.

    from txstream.testing import AppTester

    def test_a_vote_is_counted() -> None:
        t = AppTester(build_app())
        t.feed("votes", [{"vote_id": 1, "phone_number": 6175550101, "contestant_number": 3}])
        assert t.table("contestants")[(3,)]["num_votes"] == 1
        assert t.outputs("accepted_votes") == [{"vote_id": 1, ...}]

Each `feed` is one input batch, processed as the worker processes it (graph order, nested
transactions, windows, triggers, aborts) and then committed to an in-memory store that
copies rows in and out as RocksDB's encoding does. With the app's schemas (`schema_dir`,
by default the configured one), every output and state write is also encoded against its
schema as each TE ends, so a row that does not match its schema aborts its TE here as it
would in the worker. The pytest fixture `txstream_tester` (this package's pytest plugin)
builds one.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from txstream.commit.record_limit import RecordLimit
from txstream.config import Settings
from txstream.engine.group import AbortRecord, CommitGroup, Outcome, OutputBatch
from txstream.engine.partition_engine import PartitionEngine
from txstream.engine.windows import WindowState
from txstream.engine.writeset import TOMBSTONE
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.dataflow import build_dataflow
from txstream.model.declarations import Key, Procedure, Record
from txstream.model.errors import DataflowError, TxnAbort
from txstream.oltp.messages import Decision, EngineRequest
from txstream.schemas.codec import BatchCodec
from txstream.state.codec import StateCodec

__all__ = ["AppTester", "InjectedAbort", "MemoryState"]


class MemoryState:
    """Committed state in dicts: the engine's base. Rows are copied in and out, as encoding
    and decoding them for RocksDB does, so no test can share a row with stored state."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Key, Record]] = {}
        self.windows: dict[str, WindowState] = {}

    def get(self, table: str, key: Key) -> Record | None:
        row = self.tables.get(table, {}).get(key)
        return None if row is None else copy.deepcopy(row)

    def scan(self, table: str, prefix: Key) -> Iterator[tuple[Key, Record]]:
        n = len(prefix)
        rows = self.tables.get(table, {})
        for k in sorted(rows):
            if k[:n] == prefix:
                yield k, copy.deepcopy(rows[k])

    def window(self, name: str) -> WindowState | None:
        return self.windows.get(name)

    def apply(self, group: CommitGroup) -> None:
        """A committed group's writes, as the commit path applies them to RocksDB."""
        for table, rows in group.ws.tables.items():
            target = self.tables.setdefault(table, {})
            for k, v in rows.items():
                if v is TOMBSTONE:
                    target.pop(k, None)
                else:
                    target[k] = copy.deepcopy(v)
        self.windows.update(group.ws.windows)


class InjectedAbort(TxnAbort):
    """The abort `AppTester.abort_next` makes a procedure raise."""


class AppTester:
    """One partition of `app`'s dataflow, run in-process on the real engine."""

    def __init__(
        self,
        app: App,
        params: Mapping[str, Any] | None = None,
        schema_dir: Path | None = None,
        check_schemas: bool = True,
        repartition: bool = True,
    ) -> None:
        """`params` default to the app's own; `check_schemas` encodes every output and
        state write against the app's schemas from `schema_dir` (default: the configured
        one), as the worker does. With `repartition` off, what a TE sends a repartitioned
        procedure is not run here but kept (`sent`): a replay of one partition of a run
        gets those parts from the engines that owned them (`run_hop`)."""
        self.app = app
        self.repartition = repartition
        self._sent: list[OutputBatch] = []
        self._inject: dict[str, str] = {}
        dataflow = build_dataflow(self._injectable(app))
        record_check = None
        flat: frozenset[str] = frozenset()
        if check_schemas:
            registry = app.schema_registry(schema_dir or Settings().schema_dir)
            codec = StateCodec(dataflow, registry)
            codecs = {
                s.name: BatchCodec(registry.get(s.schema)) for s in dataflow.decl.streams.values()
            }
            record_check = RecordLimit(
                Settings().kafka_max_record_bytes, AppTopics(app.name), codecs, codec
            )
            record_check.checked = True
            flat = codec.flat_tables
        self.state = MemoryState()
        self.engine = PartitionEngine(
            dataflow, self.state, 0, app.params if params is None else params,
            record_check=record_check, flat_tables=flat, owner=partial(partition_of, partitions=1),
        )  # fmt: skip
        self._next_ids: dict[str, int] = {}
        self._outputs: dict[str, list[tuple[int, list[Record]]]] = {}
        self.aborts: list[AbortRecord] = []

    def feed(self, stream: str, tuples: Sequence[Record], batch_id: int | None = None) -> Outcome:
        """Process one batch of `stream` (ids count up from 1 unless given) and commit it.
        Several spanning streams share one id sequence, which is the order their batches
        run in: a batch fed runs at once, as every other spanning stream is marked as past
        its id (a later batch of one at or below it is stale)."""
        if stream not in self.engine.dataflow.decl.streams:
            known = sorted(self.engine.dataflow.decl.streams)
            raise DataflowError(f"app {self.app.name!r} has no stream {stream!r}; it has {known}")
        spanning = self.engine.spanning
        together = stream in spanning and len(spanning) > 1
        sequence = "" if together else stream  # "": the spanning streams' one sequence
        if batch_id is None:
            batch_id = self._next_ids.get(sequence, 1)
        self._next_ids[sequence] = max(self._next_ids.get(sequence, 1), batch_id + 1)
        outcome = self.engine.process(stream, batch_id, [dict(t) for t in tuples])
        if together:
            for other in sorted(spanning - {stream}):
                self.engine.progress(other, batch_id, None)
        self._hops(self._commit())
        return outcome

    def run_hop(self, procedure: str, batch_id: int, tuples: Sequence[Record]) -> None:
        """Run repartitioned `procedure` on one batch, as the engine owning its keys does
        (an unordered part, or an ordered batch's parts in sender order), and commit."""
        hops = self.engine.dataflow.hops
        if procedure not in hops:
            raise DataflowError(f"app {self.app.name!r} has no repartitioned procedure "
                                f"{procedure!r}; it has {sorted(hops)}")  # fmt: skip
        self.engine.run_hop(procedure, batch_id, [dict(t) for t in tuples])
        self._hops(self._commit())

    def sent(self) -> list[OutputBatch]:
        """With `repartition` off: every part sent to a repartitioned procedure so far."""
        return list(self._sent)

    def _hops(self, hops: list[OutputBatch]) -> None:
        """Repartitioned procedures' parts: run here (one partition owns every key), or,
        with `repartition` off, kept."""
        if not self.repartition:
            self._sent += hops
            return
        while hops:
            for i, out in enumerate(hops):
                self.engine.process_hop(out.hop or "", 0, out.batch_id, out.tuples, ("hop", 0, i))
            hops = self._commit()

    def request(self, req: EngineRequest) -> bool:
        """Handle one OLTP request (run, prepare, promise, read) as the engine owning its
        keys would, and commit; False if a prepared transaction's locks make it wait
        (nothing applied). Replies are in the engine's group, not kept."""
        applied = self.engine.request(req)
        self._commit()
        return applied

    def decide(self, decision: Decision) -> None:
        """A coordinator's decision on a prepared or promised transaction, and commit."""
        self.engine.decide(decision)
        self._commit()

    def _commit(self) -> list[OutputBatch]:
        """Commit the engine's group; the parts it sends to repartitioned procedures."""
        group = self.engine.take_group()
        self.state.apply(group)
        hops = []
        for out in group.outputs:
            if out.hop is not None:
                hops.append(out)
            else:
                self._outputs.setdefault(out.stream, []).append((out.batch_id, list(out.tuples)))
        self.aborts += group.aborts
        return hops

    def outputs(self, stream: str) -> list[Record]:
        """Every tuple committed to `stream` so far, in order."""
        return [t for _, tuples in self._outputs.get(stream, []) for t in tuples]

    def batches(self, stream: str) -> list[tuple[int, list[Record]]]:
        """The committed batches of `stream`: (batch id, tuples)."""
        return list(self._outputs.get(stream, []))

    def table(self, name: str) -> dict[Key, Record]:
        """The committed rows of table `name`, by key tuple."""
        if name not in self.engine.dataflow.decl.tables:
            known = sorted(self.engine.dataflow.decl.tables)
            raise DataflowError(f"app {self.app.name!r} has no table {name!r}; it has {known}")
        return copy.deepcopy(self.state.tables.get(name, {}))

    def tables(self) -> dict[str, dict[Key, Record]]:
        return {name: self.table(name) for name in self.engine.dataflow.decl.tables}

    def window(self, name: str) -> dict[str, list[Record]]:
        """The committed window `name`: its visible and staged tuples."""
        if name not in self.engine.dataflow.decl.windows:
            known = sorted(self.engine.dataflow.decl.windows)
            raise DataflowError(f"app {self.app.name!r} has no window {name!r}; it has {known}")
        state = self.state.windows.get(name, WindowState())
        return {"visible": copy.deepcopy(list(state.visible)),
                "staged": copy.deepcopy(list(state.staged))}  # fmt: skip

    def abort_next(self, procedure: str, reason: str = "injected") -> None:
        """Make the next TE of `procedure` abort with `reason`, as if it had called
        `ctx.abort(reason)` before doing anything."""
        if procedure not in self.engine.dataflow.decl.procedures:
            known = sorted(self.engine.dataflow.decl.procedures)
            raise DataflowError(
                f"app {self.app.name!r} has no procedure {procedure!r}; it has {known}"
            )
        self._inject[procedure] = reason

    def _injectable(self, app: App) -> Any:
        """The app's declarations with each procedure able to take an injected abort."""
        decl = copy.copy(app.decl)
        decl.procedures = {
            name: dataclasses.replace(p, fn=self._wrap(p))
            for name, p in app.decl.procedures.items()
        }
        return decl

    def _wrap(self, proc: Procedure) -> Any:
        def run(ctx: Any, batch: Sequence[Record]) -> None:
            reason = self._inject.pop(proc.name, None)
            if reason is not None:
                raise InjectedAbort(reason, "injected by AppTester.abort_next")
            proc.fn(ctx, batch)

        return run
