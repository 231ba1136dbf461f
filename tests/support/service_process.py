"""A txstream service (`txstream <args>`) as a child process of a test, stopped by pid."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from txstream.config import Settings, project_root

TXSTREAM = str(project_root() / ".venv" / "bin" / "txstream")


class ServiceProcess:
    """Runs with the test's home and broker; output is appended to `log`."""

    def __init__(
        self,
        settings: Settings,
        args: Sequence[str],
        log: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        env = {
            **os.environ,
            "TXSTREAM_HOME": str(settings.home),
            "TXSTREAM_KAFKA_BOOTSTRAP": settings.bootstrap_servers,
            # the test's own Prometheus, if it runs one (the console asks it)
            "TXSTREAM_PROMETHEUS_PORT": str(settings.prometheus_port),
            "TXSTREAM_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
            **(extra_env or {}),
        }
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [TXSTREAM, *args], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout_s: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def wait_exit(self, timeout_s: float) -> int:
        """The exit status (negative: killed by that signal) once it ends by itself."""
        return self.proc.wait(timeout_s)

    def resume(self) -> None:
        """SIGCONT: wake a process frozen at a `stop` failpoint."""
        self.proc.send_signal(signal.SIGCONT)

    def stopped(self) -> bool:
        """Frozen by SIGSTOP (its own, at a `stop` failpoint)."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] == "T"

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
