"""`txstream verify`: an app's committed run, replayed through the serial reference.

Every commit notice says, in a header, which border batches its group ran and in which order
(`engine.group.BatchRun`); the input topics hold those batches. Each partition's are run
again, in that order, through the app's own declarations on an in-memory engine
(`AppTester`, the same procedures, windows and triggers, one batch at a time); its tables
must equal what that partition's engine committed, as the changelog holds it. The first key
that differs is named, with both rows and the reference batch that last wrote it; else the
run is equal. Nobody else has this: it is the user's proof on their own data.

A spanning procedure's batches run, in batch order, on the engines owning their keys, so
each cuts the order of every partition that ran it: the reference runs, for each spanning
batch in batch order, what those partitions ran before it (per-partition batches touch
disjoint keys: any interleaving is the same), then the batch, on one engine owning every
key, and its tables must equal every partition's committed tables together. The level a
procedure declares (`Isolation`) is the reference's too: one engine at PL2 reads as of each
epoch's start as the many did.

OLTP input is in the same order: each request, decision and promise an engine handled is
named by its offset, and the reference handles the same record at the same place (a 2PC
prepare holds its writes until the decision the engine took, a promise until SERIALIZE's).
The reference does not repeat the coordinator, whose decisions are read from its topic;
what it checks is that each engine applied exactly what its input said, in its order.
After an equal replay, the tables' aggregation constraints (`model.aggregates`) are
checked on the committed rows of every partition together; and, apart from the replay,
each constrained group's committed sum must equal SERIALIZE's total for it as the
coordinator's log holds it. Only promised transactions change those sums, by the deltas
SERIALIZE admits, so the two agree once no promise is held or waiting to land: a promise
whose change was lost or applied twice, whatever code path lost it, shows there.

A repartitioned procedure runs on the engine owning each part's keys, from its own topic,
and the engine's order names what ran: an unordered part by its offset there, an ordered
batch by its id (its parts, from every sender, together in sender order). The reference
of each partition takes the parts from that topic at the same places, as input, and keeps
the parts its own TEs send rather than running them.

Scope: changelog recovery (the default). OLTP transactions in an app with spanning
procedures (a 2PC's sides would be held twice by the one reference engine) are refused,
naming them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from txstream.config import Settings
from txstream.engine.promises import PROMISED_TABLE
from txstream.kafka.published_schemas import published
from txstream.kafka.routing import partition_of
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.model.declarations import Key, Record, RecoveryMode
from txstream.oltp.messages import (
    CoordinatorLog,
    Decision,
    EngineRequest,
    Message,
    Wire,
)
from txstream.recovery.changelog import committed_tables, partition_tables
from txstream.schemas.codec import BatchCodec
from txstream.state.codec import StateCodec
from txstream.testing import AppTester
from txstream.testing.run_inputs import (
    Hop,
    Ran,
    Unverifiable,
    batches_of,
    by_offset,
    check_named,
    check_no_endpoint_calls,
    coordinator_log,
    hop_input_of,
    oltp_records,
    oltp_topics,
    order_of,
    ran_in_order,
    wire_of,
)


@dataclass(frozen=True)
class Divergence:
    partition: int
    table: str
    key: Key
    committed: Record | None  # what the engine committed (None: no row)
    reference: Record | None  # what the serial reference computed
    # the reference's last write to it: (stream, batch id), or (OLTP topic, offset)
    last_write: tuple[str, int] | None
    oltp: bool = False  # the last write was an OLTP record

    def text(self) -> str:
        where = f"partition {self.partition}, table {self.table!r}, key {list(self.key)!r}"
        what = "the record at offset {1} of {0}" if self.oltp else "batch {1} of stream {0!r}"
        by = (
            f"; the reference last wrote it in {what.format(*self.last_write)}"
            if self.last_write
            else "; the reference never wrote it"
        )
        return (
            f"diverges at {where}: committed {self.committed!r}, reference {self.reference!r}{by}"
        )


@dataclass(frozen=True)
class Verdict:
    partitions: int
    batches: int  # and OLTP records
    divergence: Divergence | None
    broken: tuple[str, ...] = ()  # aggregation constraints the committed tables break
    unseen: tuple[str, ...] = ()  # what an equal verdict says nothing about (`unseen`)

    @property
    def equal(self) -> bool:
        return self.divergence is None and not self.broken


def verify(
    settings: Settings,
    app: App,
    partitions: int,
    progress: Callable[[int, int], None] = lambda partition, batches: None,
) -> Verdict:
    """Replay every partition; the first divergence found, in partition and key order."""
    refuse(app)
    topics = AppTopics(app.name)
    registry = app.schema_registry(settings.schema_dir)
    dataflow = app.dataflow()
    codecs = {s: BatchCodec(registry.get(dataflow.decl.streams[s].schema))
              for s in dataflow.border_streams}  # fmt: skip
    writers = {p.fingerprint: BatchCodec(p.schema) for p in published(settings, topics)}
    state_codec = StateCodec(dataflow, registry)
    wire = wire_of(settings, registry) if oltp_topics(app, topics) else Wire(registry)
    runs: list[list[Ran]] = []
    for p in range(partitions):
        order = order_of(settings, topics, p)
        inputs: dict[str, dict[int, Any]] = {
            s: batches_of(settings, topics.stream(s), p, c, writers) for s, c in codecs.items()
        }
        oltp = {t: oltp_records(settings, t, p, wire) for t in oltp_topics(app, topics)}
        check_no_endpoint_calls(order, p)
        check_named(order, oltp, p)
        hops = {topics.hop(h): hop_input_of(settings, dataflow, topics, h, p, registry, writers)
                for h in dataflow.hops}  # fmt: skip
        runs.append(list(ran_in_order(order, inputs, oltp, hops)))
        progress(p, len(runs[-1]))
    spanning = frozenset(dataflow.spanning_streams)
    count = sum(map(len, runs))
    every: list[dict[str, dict[Key, Record]]] = []
    if spanning:  # one reference for every partition together
        ran = _merged(runs, spanning)
        count = len(ran)  # each spanning batch once
        committed = committed_tables(settings, state_codec, topics.changelog, partitions)
        owner = partial(partition_of, partitions=partitions)
        found = _first_difference(app, settings, ran, committed, owner)
        if found is not None:
            return Verdict(partitions, count, found, unseen=unseen(app))
        every.append(committed)
    else:
        for p, ran in enumerate(runs):
            committed = partition_tables(settings, state_codec, topics.changelog, p)
            found = _first_difference(app, settings, ran, committed, partial(_constant, p))
            if found is not None:
                return Verdict(partitions, count, found, unseen=unseen(app))
            every.append(committed)
    broken = _broken(app, every)
    if not _serializes(app):
        return Verdict(partitions, count, None, broken, unseen(app))
    if any(committed.get(PROMISED_TABLE) for committed in every):
        late = ("SERIALIZE's totals: promises were still held or waiting to land when the run "
                "was read, so the committed sums could not be compared with them",)  # fmt: skip
        return Verdict(partitions, count, None, broken, unseen(app) + late)
    totals = serialized_totals(coordinator_log(settings, topics, wire))
    return Verdict(partitions, count, None, broken + unsummed(app, every, totals), unseen(app))


def _broken(app: App, partitions: list[dict[str, dict[Key, Record]]]) -> tuple[str, ...]:
    """Each aggregation constraint a group's sum (or count) over every partition's rows
    breaks."""
    out = []
    for table in app.decl.tables.values():
        for bound in table.aggregates:
            sums: dict[str, float] = {}
            for committed in partitions:
                for row in committed.get(table.name, {}).values():
                    k, amount = bound.contribution(row) or ("", 0)
                    sums[k] = sums.get(k, 0) + amount
            out += [f"'{bound.text}' on table {table.name!r} breaks for group {k}: {v}"
                    for k, v in sorted(sums.items()) if not bound.allows(v)]  # fmt: skip
    return tuple(out)


def _serializes(app: App) -> bool:
    """Whether SERIALIZE keeps totals for `app`: it has transactions and bounded tables."""
    return bool(app.decl.transactions) and any(t.aggregates for t in app.decl.tables.values())


def serialized_totals(log: Iterable[CoordinatorLog]) -> dict[str, float]:
    """SERIALIZE's totals as the coordinator's log records them: the newest record of all
    totals, plus the deltas of each promise committed after it."""
    totals: dict[str, float] = {}
    for record in log:
        if record.kind == "totals":
            totals = {k: float(v) for k, v in json.loads(record.results).items()}
        elif record.kind == "serialized" and record.commit:
            for key, delta in json.loads(record.results):
                totals[key] = totals.get(key, 0.0) + delta
    return totals


def unsummed(
    app: App, partitions: list[dict[str, dict[Key, Record]]], totals: dict[str, float]
) -> tuple[str, ...]:
    """Each constrained group whose committed sum (or count) over every partition's rows is
    not SERIALIZE's total for it."""
    sums: dict[str, float] = {}
    for table in app.decl.tables.values():
        for bound in table.aggregates:
            for committed in partitions:
                for row in committed.get(table.name, {}).values():
                    k, amount = bound.contribution(row) or ("", 0)
                    sums[k] = sums.get(k, 0) + amount
    out = []
    for k in sorted(sums.keys() | totals.keys()):
        have, want = sums.get(k, 0), totals.get(k, 0)
        if abs(have - want) > 1e-9:
            table, text, group = json.loads(k)
            out.append(f"'{text}' on table {table!r}, group {group}: the committed rows come "
                       f"to {have:g}, the promises SERIALIZE committed to {want:g}")  # fmt: skip
    return tuple(out)


def _constant(partition: int, key: Key) -> int:
    return partition


def _first_difference(
    app: App,
    settings: Settings,
    ran: list[Ran],
    committed: dict[str, dict[Key, Record]],
    owner: Callable[[Key], int],
) -> Divergence | None:
    """The first key, in table and key order, where `committed` differs from the replay of
    `ran`, named with the partition `owner` says holds it."""
    reference = _replay(app, settings, ran)
    for table in sorted(app.decl.tables):
        mine, theirs = committed.get(table, {}), reference.table(table)
        for key in sorted(mine.keys() | theirs.keys(), key=repr):
            if mine.get(key) != theirs.get(key):
                last = _last_write(app, settings, ran, table, key)
                oltp = last is not None and last[0] in by_offset(app)
                return Divergence(owner(key), table, key, mine.get(key), theirs.get(key), last,
                                  oltp)  # fmt: skip
    return None


def _merged(runs: list[list[Ran]], spanning: frozenset[str]) -> list[Ran]:
    """Every partition's batches in one serial order: the spanning batches in batch order,
    each once, after what each partition that ran it ran before it. A partition's other
    batches touch its own keys alone, so where they fall against a spanning batch it did
    not run (one that touched none of its keys) changes nothing."""
    at = [[i for i, r in enumerate(ran) if r[0] in spanning] for ran in runs]
    every = sorted({(r[1], r[0]) for ran in runs for r in ran if r[0] in spanning})
    out: list[Ran] = []
    done, taken = [0] * len(runs), [0] * len(runs)  # items emitted, spanning ones taken
    for batch_id, stream in every:
        ran_it: Ran | None = None
        for p, ran in enumerate(runs):
            if taken[p] < len(at[p]):
                i = at[p][taken[p]]
                if ran[i][0] == stream and ran[i][1] == batch_id:
                    out += ran[done[p] : i]
                    done[p], taken[p], ran_it = i + 1, taken[p] + 1, ran[i]
        if ran_it is None:
            where = [p for p, ran in enumerate(runs)
                     if any(r[0] == stream and r[1] == batch_id for r in ran)]  # fmt: skip
            raise Unverifiable(f"partition {where[0]} ran batch {batch_id} of {stream!r} out "
                               "of batch order")  # fmt: skip
        out.append(ran_it)
    for p, ran in enumerate(runs):
        if taken[p] < len(at[p]):
            late = ran[at[p][taken[p]]]
            raise Unverifiable(f"partition {p} ran batch {late[1]} of {late[0]!r} out of "
                               "batch order")  # fmt: skip
        out += ran[done[p] :]
    return out


def unseen(app: App) -> tuple[str, ...]:
    """What verify cannot see in `app`'s run, said with every verdict: an equal replay
    vouches for none of it."""
    out = [
        "a bug the engine and its replay share: the reference runs the app's procedures "
        "through the same engine code, serially; only the aggregation constraints, and "
        "each constrained group's sum against SERIALIZE's total, are checked apart from it"
    ]
    if app.decl.transactions:
        out.append(
            "whether the coordinator decided right: each 2PC decision and SERIALIZE's order "
            "are taken as the engines read them from their topics, and checked only as "
            "applied (the aggregation constraints check SERIALIZE's bounds)"
        )
        out.append(
            "what clients were told: results and statuses are not compared with the "
            "transactions' effects"
        )
    if app.decl.transactions or app.decl.serves_requests:
        out.append(
            "records the engines dead-lettered (undecodable, unauthenticated): not replayed, "
            "as they changed nothing"
        )
    return tuple(out)


def refuse(app: App) -> None:
    df = app.dataflow()
    missing = []
    if app.decl.transactions and df.spanning_streams:
        names = ", ".join(sorted(app.decl.transactions))
        missing.append(f"OLTP transactions ({names}) beside spanning procedures")
    if app.recovery is not RecoveryMode.CHANGELOG:
        missing.append(f"{app.recovery} recovery (no changelog to compare with)")
    if missing:
        raise Unverifiable(f"app {app.name!r} has inputs verify cannot replay yet: "
                           f"{'; '.join(missing)}")  # fmt: skip


def _replay(app: App, settings: Settings, ran: Iterable[Ran]) -> AppTester:
    tester = AppTester(app, schema_dir=settings.schema_dir, repartition=False)
    for entry in _fed(ran):
        _step(tester, entry)
    return tester


def _step(tester: AppTester, entry: Ran) -> None:
    name, n, item = entry
    if isinstance(item, Hop):
        tester.run_hop(item.procedure, item.batch_id, item.tuples)
    elif isinstance(item, Decision):
        tester.decide(item)
    elif isinstance(item, EngineRequest):
        if not tester.request(item):
            raise Unverifiable(f"{name} offset {n}: the reference finds it waiting for a 2PC "
                               "decision, where the engine ran it")  # fmt: skip
    else:
        tester.feed(name, item, n)


def _fed(ran: Iterable[Ran]) -> Iterable[Ran]:
    """`ran` with the ids one engine takes in: a per-partition stream's ids repeat across
    partitions (each producer numbers its own), so in a merged order an id not above the
    stream's last is given the next one, where the engine would skip it as a repeat."""
    last: dict[str, int] = {}
    for stream, batch_id, tuples in ran:
        if isinstance(tuples, (Message, Hop)):  # an OLTP record or a hop's, as it ran
            yield stream, batch_id, tuples
            continue
        if batch_id <= last.get(stream, batch_id - 1):
            batch_id = last[stream] + 1
        last[stream] = batch_id
        yield stream, batch_id, tuples


def _last_write(
    app: App, settings: Settings, ran: list[Ran], table: str, key: Key
) -> tuple[str, int] | None:
    """Replay once more, watching one row: the batch after which it last changed (its id as
    its producer gave it)."""
    tester = AppTester(app, schema_dir=settings.schema_dir, repartition=False)
    last, before = None, None
    for (stream, batch_id, _), fed in zip(ran, _fed(ran), strict=True):
        _step(tester, fed)
        now: Any = tester.state.get(table, key)
        if now != before:
            last, before = (stream, batch_id), now
    return last
