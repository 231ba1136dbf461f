"""The Faust app of a dataflow: one agent per input topic, owning its partitions.

A chain starts at a border stream; every procedure downstream of it in the partition group
runs in-process inside the engine (PE triggers). The agents make Faust subscribe the
worker to the app's inputs, so Faust's consumer group and its co-partitioning assignor
decide which partitions this worker owns: all inputs of partition p land on one worker, in
one task. The records themselves are read by each task's own consumer, in bulk
(`task_manager`); Faust's consumer is paused on these partitions (`transport`).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import faust

from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.kafka.clients import SCRAM
from txstream.model.app import App
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.inputs import Inputs
from txstream_worker.task_manager import TaskManager, fail
from txstream_worker.transport import SCHEME

Agent = Callable[[Any], Coroutine[Any, Any, None]]


def broker_urls(bootstrap_servers: str) -> str:
    return ";".join(f"{SCHEME}://{s.strip()}" for s in bootstrap_servers.split(",") if s.strip())


def credentials(settings: Settings) -> faust.SASLCredentials:
    """SCRAM over TLS, as every txstream client of a secured cluster connects."""
    return faust.SASLCredentials(
        username=settings.kafka_user,
        password=settings.kafka_secret(),
        ssl_context=ssl.create_default_context(cafile=str(settings.ca_file)),
        mechanism=SCRAM,
    )


class TxFaustApp(faust.App):
    """A Faust app that carries its task manager, where the transport looks when it seeks."""

    txstream_tasks: TaskManager | None = None


def faust_app(
    app: App,
    settings: Settings,
    policy: CommitPolicy,
    recovery: RecoveryPolicy,
    instance_id: str,
) -> TxFaustApp:
    """The Faust app for `app`; `instance_id` names this worker slot in the consumer group.

    Membership is static: a worker restarted in the same slot gets its partitions back
    at once instead of waiting out the session timeout of its dead predecessor.
    """
    datadir = settings.data_dir / "faust" / app.name
    datadir.mkdir(parents=True, exist_ok=True)
    fapp = TxFaustApp(
        f"txstream-{app.name}",
        broker=broker_urls(settings.bootstrap_servers),
        web_enabled=False,
        datadir=str(datadir),
        consumer_group_instance_id=f"{app.name}-{instance_id}",
        broker_session_timeout=settings.worker_session_timeout_s,
        broker_heartbeat_interval=1.0,
        topic_disable_leader=True,
        broker_credentials=credentials(settings) if settings.secure else None,
    )
    manager = TaskManager(app, settings, policy, recovery)
    fapp.txstream_tasks = manager
    for topic_name in Inputs.of(app).topics:
        topic = fapp.topic(topic_name, key_type=bytes, value_type=bytes,
                           key_serializer="raw", value_serializer="raw")  # fmt: skip
        fapp.agent(topic, name=f"owner-{topic_name}")(_owner(topic_name))

    # Faust signal receivers: (sender, *payload, signal=..., **kwargs).
    async def on_assigned(sender: Any, /, *payload: Any, signal: Any, **kwargs: Any) -> None:
        await manager.on_assigned(payload[0])

    async def on_revoked(sender: Any, /, *payload: Any, signal: Any, **kwargs: Any) -> None:
        await manager.on_revoked()

    async def on_shutdown(sender: Any, /, *payload: Any, signal: Any, **kwargs: Any) -> None:
        await manager.close_all()

    fapp.on_partitions_assigned.connect(on_assigned)
    fapp.on_partitions_revoked.connect(on_revoked)
    fapp.on_before_shutdown.connect(on_shutdown)
    return fapp


def _owner(topic: str) -> Agent:
    async def owner(stream: Any) -> None:
        async for _ in stream:
            # The transport pauses these partitions in Faust's consumer; a record here
            # would be read twice or skipped, so stop and restart from committed state.
            fail(f"a record of {topic} reached Faust, which never reads the worker's inputs")

    return owner
