"""The Faust app of a dataflow: one agent per fused procedure chain.

A chain starts at a border stream; every procedure downstream of it in the partition group
runs in-process inside the engine (PE triggers), so one agent per border stream runs the
whole chain. All agents of partition p feed the same engine, which runs its transaction
executions serially.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import faust
from faust.types import TP

from txstream.commit.policy import OLTP_GROUP_MS, CommitPolicy
from txstream.config import Settings
from txstream.model.app import App
from txstream.recovery.policy import RecoveryPolicy
from txstream.runtime.inputs import Inputs
from txstream_worker.task_manager import TaskManager, fail
from txstream_worker.transport import SCHEME

Agent = Callable[[Any], Coroutine[Any, Any, None]]
OLTP_WAIT_S = 0.002
LAG_INTERVAL_S = 1.0


def broker_urls(bootstrap_servers: str) -> str:
    return ";".join(f"{SCHEME}://{s.strip()}" for s in bootstrap_servers.split(",") if s.strip())


class TxFaustApp(faust.App):
    """A Faust app that carries its engine manager, where the transport looks when it seeks."""

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
        stream_buffer_maxsize=policy.max_batches,
    )
    manager = TaskManager(app, settings, policy, recovery)
    fapp.txstream_tasks = manager
    # Batches are taken in runs as long as a group commit; OLTP messages at once, since a
    # client (or a 2PC participant holding locks) waits on each.
    batch_wait_s = max(policy.interval_ms, 1) / 1000
    topics = Inputs.of(app)
    inputs = {f"chain-{s}": (topic, batch_wait_s) for topic, s in topics.streams.items()}
    inputs |= {f"oltp-{t.rsplit('.', 1)[1]}": (t, OLTP_WAIT_S) for t in topics.oltp}
    for name, (topic_name, within_s) in inputs.items():
        topic = fapp.topic(topic_name, key_type=bytes, value_type=bytes,
                           key_serializer="raw", value_serializer="raw")  # fmt: skip
        fapp.agent(topic, name=name)(_chain(manager, policy.max_batches, within_s))

    # Faust signal receivers: (sender, *payload, signal=..., **kwargs).
    async def on_assigned(sender: Any, /, *payload: Any, signal: Any, **kwargs: Any) -> None:
        await manager.on_assigned(payload[0])

    async def on_revoked(sender: Any, /, *payload: Any, signal: Any, **kwargs: Any) -> None:
        await manager.on_revoked()

    async def on_shutdown(sender: Any, /, *payload: Any, signal: Any, **kwargs: Any) -> None:
        await manager.close_all()

    async def idle_commit() -> None:
        await manager.commit_all()

    def highwater(tp: TP) -> int | None:
        try:
            end: int = fapp.consumer.highwater(tp)
        except Exception:  # not assigned here (any more), or not fetched yet
            return None
        return end

    async def measure_lag() -> None:
        await manager.measure_lag(highwater)

    fapp.timer(LAG_INTERVAL_S)(measure_lag)
    fapp.on_partitions_assigned.connect(on_assigned)
    fapp.on_partitions_revoked.connect(on_revoked)
    fapp.on_before_shutdown.connect(on_shutdown)
    # OLTP replies wait at most OLTP_GROUP_MS for a commit, so such apps check more often.
    idle_ms = OLTP_GROUP_MS if app.decl.transactions else max(policy.interval_ms, 100)
    fapp.timer(idle_ms / 1000)(idle_commit)
    return fapp


def _chain(manager: TaskManager, max_records: int, within_s: float) -> Agent:
    async def chain(stream: Any) -> None:
        events: AsyncIterator[list[Any]] = stream.take_events(max_records, within=within_s)
        try:
            async for delivered in events:
                runs: dict[int, list[tuple[str, int, bytes | None]]] = defaultdict(list)
                for event in delivered:
                    msg = event.message
                    runs[msg.partition].append((msg.topic, msg.offset, msg.value))
                for partition, records in runs.items():
                    await manager.process(partition, records)
        except Exception:
            # Faust would restart the agent and ack the batch; that would move past a
            # half-processed batch. Exiting keeps the committed state the only truth.
            fail("procedure chain failed")

    return chain
