"""The native stack's schema registry: `txstream registry run`, at `schema_registry_url`.

It keeps its state in a Kafka topic, so it starts after the broker and stops before it; a
URL naming another host is an external registry, which the stack leaves alone.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from txstream.config import Settings
from txstream.stack.process import ManagedProcess, port_free, wait_answering

LOCAL = ("127.0.0.1", "localhost")


class RegistryError(RuntimeError):
    """The schema registry could not be started or did not become ready."""


@dataclass(frozen=True)
class RegistryServer:
    settings: Settings

    @property
    def url(self) -> str:
        return self.settings.schema_registry_url.rstrip("/")

    @property
    def local(self) -> bool:
        return urllib.parse.urlsplit(self.url).hostname in LOCAL

    @property
    def log_file(self) -> Path:
        return self.settings.log_dir / "registry.log"

    @property
    def process(self) -> ManagedProcess:
        return ManagedProcess("registry", self.settings.run_dir, marker="registry run")

    def start(self) -> int:
        parts = urllib.parse.urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 8081
        if not port_free(host, port):
            raise RegistryError(
                f"port {host}:{port} is in use by another process; set TXSTREAM_SCHEMA_REGISTRY_URL"
            )
        s = self.settings
        argv = [str(Path(sys.executable).with_name("txstream")), "registry", "run",
                "--host", host, "--port", str(port)]  # fmt: skip
        env = {**os.environ, "TXSTREAM_HOME": str(s.home),
               "TXSTREAM_KAFKA_BOOTSTRAP": s.bootstrap_servers}  # fmt: skip
        pid = self.process.spawn(argv, self.log_file, env=env)
        wait_answering(self.process, pid, lambda: self.answers(timeout_s=1.0),
                       s.startup_timeout_s, ("the registry", self.url, self.log_file),
                       RegistryError)  # fmt: skip
        return pid

    def answers(self, timeout_s: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=timeout_s) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False
