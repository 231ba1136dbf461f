"""A private PostgreSQL cluster for one benchmark run, torn down after it.

The peers need a real database, and the shared machine must not be touched: the cluster lives
in a temporary directory, listens on 127.0.0.1 at a free port (its unix socket in the same
directory), and is stopped and deleted on exit. PostgreSQL refuses to run as root, so as root
its commands run as the `postgres` user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")

PG_ROOT = Path("/usr/lib/postgresql")
USER = "bench"
# One commit's WAL reaches the kernel before the commit returns, but is not fsynced: the
# durability of the Kafka broker txstream commits to (acks=all on one broker, no flush.ms).
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "shared_buffers": "256MB",
    "max_connections": "20",
}


@dataclass(frozen=True)
class Cluster:
    port: int
    data_dir: Path
    version: str

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} dbname=postgres"


def bin_dir() -> Path:
    """The newest PostgreSQL installed by Debian's `postgresql` package."""
    versions = sorted(
        (p for p in PG_ROOT.glob("*/bin") if (p / "pg_ctl").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise RuntimeError(f"no PostgreSQL under {PG_ROOT}: install Debian's postgresql package")
    return versions[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _run(argv: list[str]) -> None:
    done = subprocess.run(_as_owner(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}")


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """initdb, start, yield, stop (fast), delete."""
    pg = bin_dir()
    root = Path(tempfile.mkdtemp(prefix="txstream-bench-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    port = free_port()
    options = " ".join(f"-c {k}={v}" for k, v in SETTINGS.items())
    try:
        _run(
            [
                str(pg / "initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        _run(
            [
                str(pg / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(root / "server.log"),
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {port} -k {root} {options}",
                "start",
            ]
        )
        try:
            yield Cluster(port, data, pg.parent.name)
        finally:
            _run([str(pg / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def serve(
    dsn: str,
    work: Iterable[T],
    clients: int,
    each: Callable[[psycopg.Connection[Any], T], None],
) -> float:
    """Run `each(connection, item)` for every item of `work`, taken in order by `clients`
    threads, each with its own SERIALIZABLE connection (as a pool of terminals would);
    returns the seconds it took. `each` counts its own results, under its own lock."""
    lock = threading.Lock()
    items = iter(work)

    def client() -> None:
        with psycopg.connect(dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
            while True:
                with lock:
                    item = next(items, None)
                if item is None:
                    return
                each(conn, item)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started
