"""Host partition engines in one process until told to stop.

A commit failure (fenced by a newer incarnation, broker gone mid-commit) ends the process
with an error: restarting from committed state is the recovery, and the supervisor does it.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
from collections.abc import Mapping
from types import FrameType
from typing import Any

from txstream.app import App
from txstream.commit.pump import TaskPump
from txstream.commit.task import CommitPolicy, EngineTask
from txstream.commit.topics import AppTopics, ensure_topics
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin

log = logging.getLogger(__name__)


class AppLoadError(ValueError):
    """The --app spec does not name a factory that returns an App."""


def load_app(spec: str, params: Mapping[str, Any]) -> App:
    """`package.module:factory`, called with the app parameters."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AppLoadError(f"--app {spec!r}: expected 'module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise AppLoadError(f"--app {spec!r}: {e}") from e
    app = factory(dict(params))
    if not isinstance(app, App):
        raise AppLoadError(f"--app {spec!r} returned {type(app).__name__}, not an App")
    return app


class Worker:
    def __init__(
        self,
        app: App,
        partitions: list[int],
        settings: Settings,
        policy: CommitPolicy = CommitPolicy(),
    ) -> None:
        self.app = app
        self.partitions = partitions
        self.settings = settings
        self.policy = policy
        self.stopping = threading.Event()

    def install_signal_handlers(self) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("signal %d: finishing the current group and stopping", signum)
            self.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def run(self) -> None:
        ensure_topics(
            TopicAdmin(self.settings),
            AppTopics(self.app.name),
            self.app.decl.streams,
            partitions=max(self.partitions) + 1,
        )
        tasks = [EngineTask(self.app, p, self.settings, self.policy) for p in self.partitions]
        pumps = [TaskPump(t, t.open()) for t in tasks]
        log.info("worker for %s serving partitions %s", self.app.name, self.partitions)
        try:
            while not self.stopping.is_set():
                for pump in pumps:
                    pump.step()
            for task in tasks:
                task.commit()
        finally:
            for pump, task in zip(pumps, tasks, strict=True):
                pump.close()
                task.close()
