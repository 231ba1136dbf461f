"""Where each running service serves its metrics, so nobody has to configure ports.

A service that serves `/metrics` writes a Prometheus file-discovery target file under
`<home>/metrics/targets/`. The native stack's Prometheus watches that directory, and
`txstream top` reads it, so a worker started on any free port is scraped within seconds.
A clean exit removes the file; a file left by a SIGKILL names a dead pid and is pruned by the
next service that registers, by `txstream stack up`, and by every reader.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import start_http_server

from txstream.config import Settings
from txstream.pids import is_alive


@dataclass(frozen=True)
class Target:
    job: str
    address: str  # host:port
    pid: int


def targets_dir(settings: Settings) -> Path:
    return settings.home / "metrics" / "targets"


def serve_metrics(settings: Settings, job: str, host: str = "127.0.0.1", port: int = 0) -> int:
    """Serve this process's metrics on host:port (0: any free port) and register the target.

    Returns the port. The registered address is the loopback one when serving on all
    interfaces, since the native Prometheus and `txstream top` run on this machine.
    """
    server, _ = start_http_server(port, addr=host)
    bound = int(server.server_port)
    scrape_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    target = Target(job, f"{scrape_host}:{bound}", os.getpid())
    path = _write(settings, target)
    atexit.register(path.unlink, missing_ok=True)
    return bound


def live_targets(settings: Settings) -> list[Target]:
    """Registered targets whose process is alive; files of dead processes are removed."""
    found: list[Target] = []
    folder = targets_dir(settings)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        target = _read(path)
        if target is None or not is_alive(target.pid):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        found.append(target)
    return found


def _write(settings: Settings, target: Target) -> Path:
    folder = targets_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    live_targets(settings)  # prune what earlier SIGKILLed services left
    group = [{"targets": [target.address], "labels": {"job": target.job, "pid": str(target.pid)}}]
    path = folder / f"{target.job}-{target.pid}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(group))
    os.replace(tmp, path)  # Prometheus must never read a half-written file
    return path


def _read(path: Path) -> Target | None:
    try:
        group = json.loads(path.read_text())[0]
        return Target(group["labels"]["job"], group["targets"][0], int(group["labels"]["pid"]))
    except (OSError, ValueError, LookupError, TypeError):
        return None
