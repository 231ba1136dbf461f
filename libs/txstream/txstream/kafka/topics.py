"""Topic names of one app: streams, changelog, command log, aborts and commit notices."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

from txstream.kafka.admin import TopicAdmin, TopicExistsError
from txstream.model.app import App


@dataclass(frozen=True)
class AppTopics:
    app: str

    def stream(self, name: str) -> str:
        return f"{self.app}.{name}"

    @property
    def changelog(self) -> str:
        """Compacted; partition p holds engine p's state. RocksDB is a cache of it."""
        return f"{self.app}.changelog"

    @property
    def command_log(self) -> str:
        """Strong or weak recovery: one record per group commit; truncated after snapshots."""
        return f"{self.app}.cmdlog"

    @property
    def schemas(self) -> str:
        """Compacted, one partition: every tuple schema the engines wrote a stream with
        (`kafka/published_schemas.py`), so readers resolve old records after a schema change."""
        return f"{self.app}.schemas"

    @property
    def aborts(self) -> str:
        return f"{self.app}.aborts"

    @property
    def commits(self) -> str:
        """Commit notices: what each engine has committed, for waiting clients and gating."""
        return f"{self.app}.commits"

    @property
    def requests(self) -> str:
        """OLTP: coordinator to engine p (run, prepare, read), in the coordinator's order."""
        return f"{self.app}.requests"

    @property
    def decisions(self) -> str:
        """2PC decisions to engine p; a separate topic, so a blocked engine still reads them."""
        return f"{self.app}.decisions"

    @property
    def replies(self) -> str:
        """Engines to the coordinator: results, votes, acks and rows (one partition)."""
        return f"{self.app}.replies"

    @property
    def oltp_in(self) -> str:
        """Clients to the coordinator: transactions and queries (one partition)."""
        return f"{self.app}.oltp.in"

    @property
    def oltp_out(self) -> str:
        """To clients: one TxnResult per request, from the coordinator or (a direct
        transaction's) the engine, on the partition its client reads (`reply_partition`)."""
        return f"{self.app}.oltp.out"

    @property
    def promises(self) -> str:
        """Clients to engine p: promised (BASIC) transactions, each on its own partition's
        log, which is what makes a promise durable (`engine.promises`)."""
        return f"{self.app}.promises"

    @property
    def statuses(self) -> str:
        """The coordinator's final status of every promised transaction, keyed by its
        request id (one partition), for anyone who did not wait on `oltp_out`."""
        return f"{self.app}.statuses"

    def reply_problem(self, topic: str) -> str | None:
        """Why the coordinator may not write a client's result to `topic` (None: it may).

        Only `oltp_out` takes results. Any other topic of the app would take a result as
        one of its own records (on `decisions`, a failed result named for a prepared
        transaction read as its COMMIT), and a topic that does not exist would fail the
        coordinator's Kafka transaction; so a client cannot choose where its answer goes.
        """
        if topic == self.oltp_out:
            return None
        return f"reply_to {topic!r} is not the app's client reply topic {self.oltp_out!r}"

    @property
    def exchange(self) -> str:
        """Spanning procedures: engine p's reads for a batch, to the other participants."""
        return f"{self.app}.exchange"

    def hop(self, procedure: str) -> str:
        """A repartitioned procedure's input, partition q for the engine owning its keys;
        each record keyed by the engine that sent it."""
        return f"{self.app}.hop.{procedure}"

    @property
    def coordinator_log(self) -> str:
        """The coordinator's durable 2PC log (one partition, kept)."""
        return f"{self.app}.coordinator"

    def transactional_id(self, partition: int) -> str:
        """Stable per partition engine, so a restarted engine fences its zombie."""
        return f"txstream-{self.app}-engine-{partition}"


# Partitions of a new app's client reply topic: each client reads one, so a client reads
# about 1/REPLY_PARTITIONS of every answer, not all of them.
REPLY_PARTITIONS = 8


def ensure_topics(
    admin: TopicAdmin,
    topics: AppTopics,
    streams: Iterable[str],
    partitions: int,
    oltp: bool = False,
    exchange: bool = False,
    hops: Iterable[str] = (),
) -> list[str]:
    """Create every topic the app needs that does not exist yet (idempotent); `oltp` adds
    the coordinator's topics, for apps that register transactions, `exchange` the
    spanning procedures' topic, and `hops` names the repartitioned procedures, each with
    its input topic. Returns the topics the app needs, in order."""
    compacted = {"cleanup.policy": "compact"}
    kept = {"retention.ms": "-1", "retention.bytes": "-1"}
    wanted: dict[str, tuple[int, dict[str, str]]] = {
        topics.stream(s): (partitions, {}) for s in streams
    }
    wanted[topics.changelog] = (partitions, compacted)
    wanted[topics.command_log] = (partitions, kept)
    wanted[topics.schemas] = (1, compacted)
    wanted[topics.aborts] = (partitions, {})
    wanted[topics.commits] = (partitions, {})
    if exchange:
        wanted[topics.exchange] = (partitions, {})
    for procedure in hops:
        wanted[topics.hop(procedure)] = (partitions, {})
    if oltp:
        wanted[topics.requests] = (partitions, {})
        wanted[topics.decisions] = (partitions, {})
        wanted[topics.promises] = (partitions, {})
        for single in (topics.replies, topics.oltp_in, topics.statuses):
            wanted[single] = (1, {})
        wanted[topics.oltp_out] = (REPLY_PARTITIONS, {})
        wanted[topics.coordinator_log] = (1, kept)
    existing = set(admin.list_topics())
    for name, (count, config) in wanted.items():
        if name in existing:
            continue
        with contextlib.suppress(TopicExistsError):  # made meanwhile by another worker: fine
            admin.create_topic(name, partitions=count, config=config)
    return list(wanted)


def ensure_app_topics(admin: TopicAdmin, app: App, partitions: int) -> list[str]:
    """`ensure_topics` for everything `app` declares."""
    df = app.dataflow()
    return ensure_topics(
        admin,
        AppTopics(app.name),
        app.decl.streams,
        partitions,
        oltp=app.decl.serves_requests,
        exchange=bool(df.spanning_streams),
        hops=df.hops,
    )
