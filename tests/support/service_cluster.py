"""What every test cluster of service processes shares: stopping them, and a client."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.service_process import ServiceProcess
from txstream.client import TxClient
from txstream.config import Settings


class ServiceCluster:
    """An app's worker and coordinator processes (`processes`), named `name`."""

    name: str
    settings: Settings
    processes: list[ServiceProcess]

    def stop_all(self) -> None:
        for proc in self.processes:
            if proc.alive():
                try:
                    proc.terminate(30)
                except Exception:
                    proc.kill()

    @contextmanager
    def client(self, timeout_s: float = 20.0) -> Iterator[TxClient]:
        with TxClient(self.name, self.settings, timeout_s=timeout_s) as c:
            yield c
