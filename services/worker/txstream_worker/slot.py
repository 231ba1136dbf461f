"""A worker's slot: its static member id in the consumer group, held by one live process.

Two live workers in one slot fence each other in the group (the broker keeps whichever
joined last, and the other never learns why it gets nothing) and open the same partition
stores. So a slot is an exclusive lock file under the data directory, which the kernel
releases when the process dies (also by SIGKILL): a worker started without an id takes the
first free slot on this host, and one given an id that is held refuses to run.

Slots without an explicit id are named `<host>-<n>`, so workers on different hosts sharing
one broker never collide either, while a worker restarted on the same host gets its old slot
and its partitions back at once (static membership).
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

MAX_AUTO_SLOTS = 64
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class SlotHeld(RuntimeError):
    """The slot asked for is held by another live worker."""


@dataclass
class WorkerSlot:
    """An open, locked slot file; the lock lives as long as this process holds `fd`."""

    instance_id: str
    path: Path
    fd: int

    @classmethod
    def claim(cls, lock_dir: Path, app: str, wanted: str | None) -> WorkerSlot:
        """The slot `wanted`, or without one the first free `<host>-<n>` slot."""
        lock_dir.mkdir(parents=True, exist_ok=True)
        if wanted is not None:
            slot = cls._try(lock_dir, wanted)
            if slot is None:
                path = cls._path(lock_dir, wanted)
                raise SlotHeld(
                    f"worker slot {wanted!r} of app {app!r} is held by pid {_holder(path)} "
                    f"(lock {path}); give each worker its own --instance-id / TXSTREAM_WORKER_ID"
                )
            return slot
        host = _SAFE.sub("_", socket.gethostname()) or "host"
        for n in range(MAX_AUTO_SLOTS):
            slot = cls._try(lock_dir, f"{host}-{n}")
            if slot is not None:
                return slot
        raise SlotHeld(
            f"all {MAX_AUTO_SLOTS} worker slots of app {app!r} on {host} are held (locks in "
            f"{lock_dir}); give this worker an --instance-id"
        )

    @staticmethod
    def _path(lock_dir: Path, instance_id: str) -> Path:
        return lock_dir / f"{_SAFE.sub('_', instance_id)}.lock"

    @classmethod
    def _try(cls, lock_dir: Path, instance_id: str) -> WorkerSlot | None:
        path = cls._path(lock_dir, instance_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        return cls(instance_id, path, fd)


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"
