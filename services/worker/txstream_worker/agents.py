"""The Faust app of a dataflow: the worker's seat in the consumer group of its inputs.

A chain starts at a border stream; every procedure downstream of it in the partition group
runs in-process inside the engine (PE triggers). The app registers its input topics with
Faust's conductor (`app.topics`), which subscribes the worker to them without any agent, so
Faust's consumer group and its co-partitioning assignor decide which partitions this worker
owns: all inputs of partition p land on one worker, in one task. The records themselves are
read by each task's own consumer, in bulk (`task_manager`); Faust's consumer is paused on
these partitions (`transport`) and hands none of them out.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any, NoReturn

import faust
from faust.types import AppT, CodecArg, Message

from txstream.commit.policy import CommitPolicy
from txstream.config import Settings
from txstream.kafka.clients import SCRAM
from txstream.kafka.owners import worker_group
from txstream.model.app import App
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.inputs import Inputs
from txstream_worker.task_manager import TaskManager, fail
from txstream_worker.transport import SCHEME


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


class UnreadInput(faust.Schema[bytes, bytes]):
    """The schema of the app's inputs in Faust, which decodes the key of each record it
    hands out: the tasks read these records, and Faust must hand out none."""

    def loads_key(
        self,
        app: AppT,
        message: Message,
        *,
        loads: Callable[..., Any] | None = None,
        serializer: CodecArg | None = None,
    ) -> NoReturn:
        # The transport pauses Faust on every input partition, so a record here means the
        # pause failed and Faust reads the inputs beside the tasks: stop, and restart from
        # committed state.
        fail(f"a record of {message.topic} reached Faust, which never reads the worker's inputs")


def faust_app(
    app: App,
    settings: Settings,
    policy: CommitPolicy,
    recovery: RecoveryPolicy,
    instance_id: str,
    client_id: str | None = None,
) -> TxFaustApp:
    """The Faust app for `app`; `instance_id` names this worker slot in the consumer group,
    and `client_id` its query endpoint there (`kafka.owners`).

    Membership is static: a worker restarted in the same slot gets its partitions back
    at once instead of waiting out the session timeout of its dead predecessor.
    """
    datadir = settings.data_dir / "faust" / app.name
    datadir.mkdir(parents=True, exist_ok=True)
    fapp = TxFaustApp(
        worker_group(app.name),
        broker=broker_urls(settings.bootstrap_servers),
        web_enabled=False,
        datadir=str(datadir),
        consumer_group_instance_id=f"{app.name}-{instance_id}",
        broker_client_id=client_id or "txstream-worker",
        broker_session_timeout=settings.worker_session_timeout_s,
        broker_heartbeat_interval=1.0,
        topic_disable_leader=True,
        # Faust's consumer uses the app's co-partitioning assignor only while this is above
        # zero or the app has tables, and this one has none (docs/worker-faust.md).
        table_standby_replicas=1,
        broker_credentials=credentials(settings) if settings.secure else None,
    )
    if fapp.conf.table_standby_replicas < 1:  # Faust's environment overrides its arguments
        raise ValueError(
            "TABLE_STANDBY_REPLICAS must be at least 1 for a worker: with 0, Faust assigns "
            "partitions round-robin, and one partition's inputs reach different workers"
        )
    manager = TaskManager(app, settings, policy, recovery)
    fapp.txstream_tasks = manager
    for topic_name in Inputs.of(app).topics:
        fapp.topics.add(fapp.topic(topic_name, schema=UnreadInput()))

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
