"""Topic administration with errors that say what went wrong and where.

confluent-kafka's admin futures fail with bare error codes, or hang until a long socket
timeout when no broker answers; every call here first asks for metadata within a short
timeout, so an unreachable cluster is reported as such, naming the address.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition

# confluent_kafka.admin re-exports these without an __all__, which strict mypy rejects.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
    TopicMetadata,
)

from txstream.config import Settings
from txstream.kafka.clients import common_config, error_text

T = TypeVar("T")

_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]

_UNREACHABLE = frozenset(
    {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN}
)
# A partition's leader moved on since the client cached it: librdkafka's admin client does
# not refresh its metadata for these, so asking again with the same client fails again.
_STALE_LEADER = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    }
)
_NOT_YET_LEADER = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # a fresh broker's metadata can run ahead of the partition it is still opening
        KafkaError.UNKNOWN_LEADER_EPOCH,
    }
)


_CREATE_ATTEMPTS = 3


class KafkaAdminError(RuntimeError):
    """A topic operation the cluster refused or did not answer."""


class BrokerUnreachableError(KafkaAdminError):
    """No broker answered at the configured address within the timeout."""


class TopicExistsError(KafkaAdminError):
    """The topic to create already exists."""


class TopicNotFoundError(KafkaAdminError):
    """The named topic does not exist."""


@dataclass(frozen=True)
class PartitionState:
    """One partition's placement and offsets.

    `end_offset` is the log end, which counts aborted records and transaction markers;
    `stable_offset` is where read_committed consumers stop, below the first open transaction.
    """

    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start_offset: int
    end_offset: int
    stable_offset: int


@dataclass(frozen=True)
class TopicDescription:
    """`config` holds the topic's own overrides; `effective_config` every value in force."""

    name: str
    partitions: tuple[PartitionState, ...]
    config: dict[str, str]
    effective_config: dict[str, str]


class TopicAdmin:
    """Create, list and describe topics on the cluster named by `settings`."""

    def __init__(self, settings: Settings, timeout_s: float = 10.0) -> None:
        self.bootstrap = settings.bootstrap_servers
        self.timeout_s = timeout_s
        self._config = common_config(settings)
        self._client = AdminClient(self._config)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create the topic and return once its partitions have leaders, so it is usable.

        Without a replication factor the cluster's `default.replication.factor` applies: 1
        on a single broker, 3 on the local three-broker cluster."""
        self._metadata()
        replicas = -1 if replication_factor is None else replication_factor
        new = NewTopic(name, partitions, replicas, config=dict(config or {}))
        dropped = False
        for attempt in range(_CREATE_ATTEMPTS):
            future = self._client.create_topics(
                [new], operation_timeout=self.timeout_s, request_timeout=self.timeout_s
            )[name]
            try:
                self._result(future, f"create topic {name!r}")
                break
            except KafkaAdminError as e:
                code = _code(e.__cause__) if isinstance(e.__cause__, KafkaException) else None
                if code == KafkaError._DESTROY_BROKER and attempt + 1 < _CREATE_ATTEMPTS:
                    # The client replaced the connection the request went out on (a
                    # bootstrap address swapped for the broker it names): it may or may not
                    # have reached the controller, so ask again.
                    dropped = True
                    continue
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    if dropped:
                        break  # our own first attempt created it
                    raise TopicExistsError(f"topic {name!r} already exists") from e.__cause__
                raise
        self._wait_for(lambda: self._ready(name), f"topic {name!r} to get partition leaders")

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted; Kafka's own (`__consumer_offsets`, ...) only if asked."""
        names = self._metadata().topics
        return sorted(n for n in names if include_internal or not n.startswith("__"))

    def partition_counts(self) -> dict[str, int]:
        """{topic: partitions} for every topic but Kafka's own, from one metadata request."""
        topics = self._metadata().topics
        return {n: len(t.partitions) for n, t in topics.items() if not n.startswith("__")}

    def partitions(self, name: str) -> list[int]:
        """The topic's partition ids, or TopicNotFoundError."""
        return sorted(self._topic(name).partitions)

    def describe_topic(self, name: str) -> TopicDescription:
        topic = self._topic(name)
        tps = [TopicPartition(name, p) for p in sorted(topic.partitions)]
        starts = self._offsets(tps, _EARLIEST, IsolationLevel.READ_UNCOMMITTED)
        ends = self._offsets(tps, _LATEST, IsolationLevel.READ_UNCOMMITTED)
        stable = self._offsets(tps, _LATEST, IsolationLevel.READ_COMMITTED)
        states = tuple(
            PartitionState(
                partition=p.id,
                leader=p.leader,
                replicas=tuple(p.replicas),
                isr=tuple(p.isrs),
                start_offset=starts[p.id],
                end_offset=ends[p.id],
                stable_offset=stable[p.id],
            )
            for p in sorted(topic.partitions.values(), key=lambda p: p.id)
        )
        resource = ConfigResource(ResourceType.TOPIC, name)
        future = self._client.describe_configs([resource], request_timeout=self.timeout_s)[resource]
        try:
            entries: dict[str, Any] = self._result(future, f"describe the config of topic {name!r}")
        except KafkaAdminError as e:
            # In a cluster, the broker asked for the config may not know a new topic yet.
            if isinstance(e.__cause__, KafkaException) and (
                _code(e.__cause__) == KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                raise TopicNotFoundError(f"{e} (not on every broker yet?)") from e
            raise
        return TopicDescription(
            name=name,
            partitions=states,
            config={
                k: e.value or ""
                for k, e in sorted(entries.items())
                if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            },
            effective_config={k: e.value or "" for k, e in sorted(entries.items())},
        )

    def start_offset(self, name: str, partition: int) -> int:
        """The first offset still stored: records before it were deleted or truncated."""
        tp = TopicPartition(name, partition)
        return self._offsets([tp], _EARLIEST, IsolationLevel.READ_UNCOMMITTED)[partition]

    def stable_end(self, name: str, partition: int) -> int:
        """The last stable offset: what a read_committed consumer can read up to now."""
        tp = TopicPartition(name, partition)
        return self._offsets([tp], _LATEST, IsolationLevel.READ_COMMITTED)[partition]

    def delete_records(self, name: str, partition: int, before: int) -> None:
        """Truncate `name[partition]` below offset `before` (a command log after a snapshot)."""
        tp = TopicPartition(name, partition, before)
        futures = self._client.delete_records([tp], request_timeout=self.timeout_s)
        self._result(futures[tp], f"delete records of {name}[{partition}] before {before}")

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics and wait until the broker has; one already gone is no error."""
        names = list(names)
        if not names:
            return
        futures = self._client.delete_topics(names, operation_timeout=self.timeout_s)
        for name, future in futures.items():
            try:
                self._result(future, f"delete topic {name}")
            except KafkaAdminError as e:
                if not isinstance(e.__cause__, KafkaException) or (
                    _code(e.__cause__) != KafkaError.UNKNOWN_TOPIC_OR_PART
                ):
                    raise
        # the controller has deleted them; a busy broker's metadata may still list them
        gone = set(names)
        self._wait_for(
            lambda: not gone & set(self._metadata().topics), f"topics {sorted(gone)} to go"
        )

    def _topic(self, name: str) -> TopicMetadata:
        topic = self._metadata().topics.get(name)
        if topic is None:
            raise TopicNotFoundError(f"topic {name!r} does not exist on {self.bootstrap}")
        if topic.error is not None:
            raise KafkaAdminError(f"topic {name!r}: {topic.error.str()}")
        return topic

    def _ready(self, name: str) -> bool:
        """Whether every partition has a leader that already serves offset requests.

        Metadata names a leader a moment before that broker has opened the partition, and a
        client arriving in between gets NOT_LEADER_FOR_PARTITION.
        """
        topic = self._metadata().topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            return False
        futures = self._client.list_offsets(
            {TopicPartition(name, p): _LATEST for p in topic.partitions},
            request_timeout=self.timeout_s,
        )
        try:
            for future in futures.values():
                future.result(timeout=self.timeout_s)
        except KafkaException as e:
            if _code(e) in _NOT_YET_LEADER:
                return False
            raise KafkaAdminError(f"topic {name!r} was created but is not usable: {e}") from e
        return True

    def _metadata(self) -> ClusterMetadata:
        try:
            return self._client.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            if _code(e) in _UNREACHABLE:
                raise BrokerUnreachableError(
                    f"no Kafka broker answered at {self.bootstrap} within {self.timeout_s:g}s"
                ) from e
            raise KafkaAdminError(f"metadata request to {self.bootstrap} failed: {e}") from e

    def _offsets(
        self, tps: list[TopicPartition], spec: OffsetSpec, level: IsolationLevel
    ) -> dict[int, int]:
        """Offsets by partition; a leader that moved on since the client cached it (a broker
        restarted, say) gets a new client, whose metadata is fresh, and one more try."""
        try:
            return self._list_offsets(tps, spec, level)
        except KafkaAdminError as e:
            cause = e.__cause__
            if not (isinstance(cause, KafkaException) and _code(cause) in _STALE_LEADER):
                raise
        self._client = AdminClient(self._config)
        return self._list_offsets(tps, spec, level)

    def _list_offsets(
        self, tps: list[TopicPartition], spec: OffsetSpec, level: IsolationLevel
    ) -> dict[int, int]:
        futures = self._client.list_offsets(
            {tp: spec for tp in tps}, isolation_level=level, request_timeout=self.timeout_s
        )
        return {
            tp.partition: int(self._result(f, f"list offsets of {tp.topic}[{tp.partition}]").offset)
            for tp, f in futures.items()
        }

    def _result(self, future: Future[T], what: str) -> T:
        try:
            return future.result(timeout=self.timeout_s)
        except KafkaException as e:
            raise KafkaAdminError(f"cannot {what}: {error_text(e)}") from e
        except TimeoutError as e:
            raise BrokerUnreachableError(
                f"cannot {what}: {self.bootstrap} did not answer within {self.timeout_s:g}s"
            ) from e

    def _wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise KafkaAdminError(f"timed out after {self.timeout_s:g}s waiting for {what}")
            time.sleep(0.05)


def _code(e: KafkaException) -> int | None:
    err = e.args[0] if e.args else None
    return err.code() if isinstance(err, KafkaError) else None
