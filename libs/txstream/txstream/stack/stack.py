"""`up`, `down` and `status` over every component of the native stack.

`up` is idempotent: a live component is left alone, and a stale pidfile left by a SIGKILL is
reported, cleared, and the component is started again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from txstream.config import Settings
from txstream.stack.broker import BrokerError, KafkaBroker


class State(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    DEAD = "dead"  # pidfile present, process gone (killed or crashed)


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    state: State
    pid: int | None
    detail: str


Report = Callable[[str], None]


class Stack:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.broker = KafkaBroker(settings)

    def status(self) -> list[ComponentStatus]:
        proc = self.broker.process
        pid = proc.live_pid()
        if pid is not None:
            serving = "answering" if self.broker.answers() else "not answering yet"
            detail = f"{self.settings.bootstrap_servers} ({serving})"
            return [ComponentStatus("kafka", State.RUNNING, pid, detail)]
        if proc.is_stale():
            detail = f"pidfile {proc.pidfile} names pid {proc.recorded_pid()}, which is gone"
            return [ComponentStatus("kafka", State.DEAD, proc.recorded_pid(), detail)]
        return [ComponentStatus("kafka", State.STOPPED, None, "")]

    def up(self, report: Report) -> None:
        if self.settings.kafka_bootstrap:
            if not self.broker.answers(timeout_s=5.0):
                raise BrokerError(
                    f"external Kafka at {self.settings.kafka_bootstrap} does not answer"
                )
            report(f"using external Kafka at {self.settings.kafka_bootstrap}")
            return
        proc = self.broker.process
        pid = proc.live_pid()
        if pid is not None:
            report(
                f"kafka already running (pid {pid}) at {self.settings.bootstrap_servers}; "
                "nothing to do"
            )
            return
        if proc.is_stale():
            report(f"kafka: stale pidfile (pid {proc.recorded_pid()} is gone); restarting")
            proc.clear()
        report(f"kafka: starting at {self.settings.bootstrap_servers} ...")
        pid = self.broker.start()
        report(f"kafka: running (pid {pid}), logs in {self.broker.log_file}")

    def down(self, report: Report) -> None:
        proc = self.broker.process
        if proc.stop():
            report("kafka: stopped")
        else:
            report("kafka: not running")
