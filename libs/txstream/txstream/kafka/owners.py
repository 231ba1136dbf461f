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
from txstream.kafka.clients import common_config

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


def owners(
    settings: Settings, app: str, timeout_s: float = 10.0, admin: AdminClient | None = None
) -> dict[int, str]:
    """{partition: query endpoint} of the workers holding the app's partitions now (its
    inputs are co-partitioned: one worker holds every input of a partition); a partition
    in a rebalance, or held by a worker without an endpoint, is missing. `admin`: a client
    to ask with, kept by callers that ask often (a new one connects first)."""
    group = worker_group(app)
    admin = admin or AdminClient(common_config(settings))
    desc = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
    found: dict[int, str] = {}
    for member in desc.result(timeout_s).members:
        url = endpoint_of(member.client_id)
        if url is None or member.assignment is None:
            continue
        for tp in member.assignment.topic_partitions:
            found[tp.partition] = url
    return found
