"""What each principal may do with an app's topics on a secured cluster.

Only the coordinator writes prepare requests, decisions and its own log: a worker, the
sequencer or a client that tries is refused by the broker, so no one but the coordinator
can make a participant commit. A client writes only the app's inbound streams, its OLTP
requests and its promised transactions (which an engine takes only as promises), and reads
the rest. The services' consumer groups and transactional ids are
not split by app (any name): the topics are what is guarded.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka.admin import (  # type: ignore[attr-defined]  # exported, untyped
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from txstream.kafka.topics import AppTopics

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
SERVICES = ("worker", "sequencer", "coordinator")
CLUSTER = "kafka-cluster"
ANY = "*"  # a literal wildcard: every name


def app_acls(topics: AppTopics, border_streams: Iterable[str]) -> list[AclBinding]:
    """The bindings for one app: services, then clients."""
    prefix = f"{topics.app}."
    coordinator_only = (topics.requests, topics.decisions, topics.coordinator_log)
    acls: list[AclBinding] = []
    for service in SERVICES:
        acls += [
            _acl(service, ResourceType.TOPIC, prefix, AclOperation.ALL, prefixed=True),
            _acl(service, ResourceType.GROUP, ANY, AclOperation.ALL),
            _acl(service, ResourceType.TRANSACTIONAL_ID, ANY, AclOperation.ALL),
            _acl(service, ResourceType.BROKER, CLUSTER, AclOperation.IDEMPOTENT_WRITE),
            _acl(service, ResourceType.BROKER, CLUSTER, AclOperation.DESCRIBE),
        ]
        if service != "coordinator":
            acls += [_acl(service, ResourceType.TOPIC, t, AclOperation.WRITE, DENY)
                     for t in coordinator_only]  # fmt: skip
    inbound = [topics.stream(s) for s in border_streams] + [topics.oltp_in, topics.promises]
    acls += [
        _acl("client", ResourceType.TOPIC, prefix, AclOperation.READ, prefixed=True),
        _acl("client", ResourceType.TOPIC, prefix, AclOperation.DESCRIBE, prefixed=True),
        _acl("client", ResourceType.GROUP, ANY, AclOperation.READ),
        _acl("client", ResourceType.TRANSACTIONAL_ID, ANY, AclOperation.WRITE),
        _acl("client", ResourceType.TRANSACTIONAL_ID, ANY, AclOperation.DESCRIBE),
        _acl("client", ResourceType.BROKER, CLUSTER, AclOperation.IDEMPOTENT_WRITE),
        *(_acl("client", ResourceType.TOPIC, t, AclOperation.WRITE) for t in inbound),
    ]
    return acls


def grant(admin: AdminClient, acls: list[AclBinding], timeout_s: float = 30.0) -> None:
    """Create the bindings (creating one that exists is a no-op); raises on the first the
    cluster refused."""
    for future in admin.create_acls(acls, request_timeout=timeout_s).values():
        future.result()


def describe(acl: AclBinding) -> str:
    """One binding on a line: `User:worker DENY WRITE TOPIC LITERAL 'bank.decisions'`."""
    parts = (acl.permission_type, acl.operation, acl.restype, acl.resource_pattern_type)
    return f"{acl.principal} {' '.join(getattr(p, 'name', str(p)) for p in parts)} {acl.name!r}"


def _acl(
    principal: str,
    resource: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    prefixed: bool = False,
) -> AclBinding:
    pattern = ResourcePatternType.PREFIXED if prefixed else ResourcePatternType.LITERAL
    return AclBinding(resource, name, pattern, f"User:{principal}", "*", operation, permission)
