"""Which worker owns each partition of an app, and where it answers reads.

The app's consumer group is the one truth about ownership: each worker joins it with a
client id naming its query endpoint (`worker_client_id`), and the group's assignment says
which partitions of the app's inputs it holds. A client (or a worker asked for a partition
it does not hold) describes the group to find the owner, as Kafka Streams' interactive
queries find a key's instance from the group's metadata.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin, TopicNotFoundError
from txstream.kafka.clients import common_config
from txstream.kafka.topics import AppTopics

_PREFIX = "txstream-worker@"


def worker_group(app: str) -> str:
    """The consumer group of the app's workers."""
    return f"txstream-{app}"


def worker_client_id(host: str, port: int) -> str:
    """A worker's client id in its group: names its query endpoint."""
    return f"{_PREFIX}{host}:{port}"


def endpoint_of(client_id: str) -> str | None:
    """The query endpoint (`http://host:port`) a worker's client id names, if it is one."""
    if not client_id.startswith(_PREFIX):
        return None
    address = client_id[len(_PREFIX) :]
    host, sep, port = address.rpartition(":")
    return f"http://{address}" if sep and host and port.isdigit() else None


def app_partitions(settings: Settings, app: str) -> int:
    """The app's partition count, which the routing function takes: its changelog's (made
    with its other topics, transactions or not)."""
    changelog = AppTopics(app).changelog
    try:
        return len(TopicAdmin(settings).partitions(changelog))
    except TopicNotFoundError as e:
        raise RuntimeError(
            f"no topic {changelog}: is app {app!r} running (its workers make its topics)?"
        ) from e


class WorkerGroup:
    """The app's group of workers, described on demand with one admin client, made at the
    first description and kept (a new one connects first)."""

    def __init__(self, settings: Settings, app: str) -> None:
        self.settings, self.app = settings, app
        self._admin: AdminClient | None = None

    def members(self, timeout_s: float = 10.0) -> list[tuple[str, set[int]]]:
        """Each worker in the group now: its client id and the partitions it holds (its
        inputs are co-partitioned: one worker holds every input of a partition)."""
        if self._admin is None:
            self._admin = AdminClient(common_config(self.settings))
        group = worker_group(self.app)
        desc = self._admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
        out = []
        for member in desc.result(timeout_s).members:
            held = member.assignment.topic_partitions if member.assignment is not None else []
            out.append((member.client_id, {tp.partition for tp in held}))
        return out

    def owners(self, timeout_s: float = 10.0) -> dict[int, str]:
        """{partition: query endpoint} of the workers holding the app's partitions now; a
        partition in a rebalance, or held by a worker without an endpoint, is missing."""
        found: dict[int, str] = {}
        for client_id, held in self.members(timeout_s):
            url = endpoint_of(client_id)
            if url is not None:
                found.update(dict.fromkeys(held, url))
        return found
