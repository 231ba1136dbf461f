"""Reads of a partition's committed state, answered between its groups without a commit.

A point read, or a read-only OLTP transaction, sees the state every applied group commit
left, and nothing of the group being filled or the one in flight: it takes its place in
the partition's serial order after the last applied commit. Since it writes nothing and
reports nothing a crash could undo, it needs no Kafka transaction of its own.

A read waits (`Conflict`) at a row with a write its client may know of that the committed
state lacks yet: one in the commit in flight (whose answers may already be out), one in
the pending group once a 2PC or promise decision is in it, or a promise's not landed yet
(the coordinator tells the client the outcome before the participants commit it, or even
receive it). So a reader sees its own acknowledged writes. A row a prepared 2PC
transaction holds makes it wait too, as it does an OLTP transaction. Other writes of the
pending group are answered to no one before it commits: a read is placed before them, and
does not wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from txstream.engine.fragments import Conflict, Failed, FragmentRunner, Guard, Uncommitted
from txstream.engine.group import SYS_TABLE, last_batch_key, position_key
from txstream.engine.ledger import BatchLedger
from txstream.engine.writeset import WriteSet
from txstream.model.declarations import Key, Record
from txstream.oltp.messages import Fragment

__all__ = ["CommittedReader", "Conflict", "Freshness", "Uncommitted"]


@dataclass(frozen=True)
class Freshness:
    """What committed state an answer reflects: each input's next offset and each stream's
    last batch id, as the last applied commit left them."""

    partition: int
    positions: Mapping[str, int] = field(default_factory=dict)
    batches: Mapping[str, int] = field(default_factory=dict)


class CommittedReader:
    def __init__(
        self,
        ledger: BatchLedger,
        fragments: FragmentRunner,
        tables: Iterable[str],
        locked: Guard,
        promised: Callable[[str, Key | None], bool],
    ) -> None:
        self.ledger = ledger
        self.fragments = fragments
        self.tables = frozenset(tables)
        self.locked = locked  # stops at a row a prepared transaction holds (`Participant`)
        self.promised = promised  # whether a promise not landed yet writes (table, key)

    def guard(self, table: str, key: Key | None) -> None:
        """Stop at a row, or for a scan a table, with a write its client may know of that
        is not applied yet (`Uncommitted`), or held by a prepared transaction (`Conflict`)."""
        self.locked(table, key)
        group = self.ledger.group
        known = group.ws if group.flags.told else group.ws.parent  # see the module's doc
        if known is not None:
            if key is None and known.chain_writes(table, ()):
                raise Uncommitted(f"table {table} has writes not yet committed")
            if key is not None and known.written(table, key):
                raise Uncommitted(f"row {list(key)} of {table} has a write not yet committed")
        if self.promised(table, key):
            raise Conflict(f"a promise not landed yet writes {table}")

    def row(self, table: str, key: Key) -> Record | None:
        """The committed row of `table` at `key`. Raises `Conflict` while it must wait and
        `ValueError` for a table the app does not declare."""
        if table not in self.tables:
            raise ValueError(f"no table {table!r}; tables are {sorted(self.tables)}")
        self.guard(table, key)
        row = self.ledger.base.get(table, key)
        return None if row is None else dict(row)

    def call(self, fragments: Sequence[Fragment]) -> str | Failed:
        """Run read-only fragments against the committed state: their results as JSON, or
        why they failed (`read_only` if one wrote). Raises `Conflict` while it must wait."""
        outcome = self.fragments.execute(fragments, parent=WriteSet(), guard=self.guard)
        if isinstance(outcome, Failed):
            return outcome
        ws, results = outcome
        wrote = sorted(t for t, rows in ws.tables.items() if rows) + sorted(ws.windows)
        if wrote:
            return Failed(
                "read_only",
                f"a read-only call wrote {', '.join(wrote)}: send it as a transaction "
                "(TxClient.call without read_only) to change state",
            )
        return results

    def freshness(self, topics: Iterable[str], streams: Iterable[str]) -> Freshness:
        base, p = self.ledger.base, self.ledger.partition

        def committed(key: tuple[str, str, int]) -> int | None:
            row = base.get(SYS_TABLE, key)
            return None if row is None else int(row["value"])

        positions = {t: committed(position_key(t, p)) or 0 for t in topics}
        batches = {s: b for s in streams if (b := committed(last_batch_key(s, p))) is not None}
        return Freshness(p, positions, batches)
