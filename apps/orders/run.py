"""One run of the order pipeline on the real stack, for the CLI and the benchmark."""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orders.commits import CommitWatch
from orders.dataflow import build_app
from orders.files import Shop
from orders.loader import ShopLoader, event_batches
from orders.result import Result
from orders.results import committed_result
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.model.declarations import Record
from txstream.stack.supervisor import Policy, Supervised


@dataclass(frozen=True)
class RunConfig:
    batch_size: int = 1
    partitions: int = 4
    workers: int = 1
    timeout_s: float = 3600.0
    # batches per second to send at, for latency; None sends them all at once
    rate: float | None = None

    def __post_init__(self) -> None:
        for name in ("batch_size", "partitions", "workers"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


@dataclass
class RunReport:
    app: str
    config: RunConfig
    events: int
    batches: int
    elapsed_s: float = 0.0
    restarts: int = 0
    result: Result = field(default_factory=Result)
    # paced runs: each batch's time from when it was due to be sent until every partition
    # had committed it
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def events_per_s(self) -> float:
        return self.events / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        c = self.config
        return (
            f"{self.events} events ({self.batches} batches of up to {c.batch_size}) in "
            f"{self.elapsed_s:.2f}s = {self.events_per_s:,.0f} events/s on {c.partitions} "
            f"partitions, {c.workers} workers (worker restarts: {self.restarts})"
        )


@dataclass
class Progress:
    """What a run tells its caller as it goes (all optional)."""

    phase: Callable[[str, int | None], None] = lambda what, total: None
    loaded: Callable[[int], None] = lambda batches: None
    committed: Callable[[int], None] = lambda batches: None
    reading: Callable[[str], None] = lambda what: None


class OrdersRun:
    def __init__(self, shop: Shop, config: RunConfig, settings: Settings) -> None:
        self.shop, self.config, self.settings = shop, config, settings
        self.app = build_app(f"orders-{uuid.uuid4().hex[:10]}")
        self._pacer: threading.Thread | None = None

    def workers(self) -> list[Supervised]:
        """W supervised workers; worker i's pid is in `<home>/run/worker-i.pid`."""
        params = json.dumps({"name": self.app.name})
        txstream = str(Path(sys.executable).with_name("txstream"))
        argv = [txstream, "worker", "run", "--app", "orders.dataflow:from_params",
                "--params", params]  # fmt: skip
        policy = Policy(max_restarts=100, window_s=60.0, backoff_ms=100, backoff_max_ms=1000)
        return [
            Supervised(
                f"worker-{i}", [*argv, "--instance-id", str(i)], self.settings, policy=policy
            )
            for i in range(self.config.workers)
        ]

    def _paced(
        self,
        loader: ShopLoader,
        batches: list[list[Record]],
        rate: float,
        report: RunReport,
        committed: Callable[[list[dict[str, int]]], None],
    ) -> Callable[[list[dict[str, int]]], None]:
        """Send in a thread at `rate`; returns the commit callback that times each batch."""
        due: dict[int, float] = {}
        self._pacer = threading.Thread(
            target=loader.load_paced, args=(batches, rate, due.__setitem__), daemon=True
        )
        self._pacer.start()
        timed = [0]

        def timing(done: list[dict[str, int]]) -> None:
            now = time.monotonic()
            reached = min(d.get("events", 0) for d in done)
            for b in range(timed[0] + 1, reached + 1):
                report.latencies_ms.append((now - due[b]) * 1000)
            timed[0] = max(timed[0], reached)
            committed(done)

        return timing

    def run(self, progress: Progress | None = None) -> RunReport:
        """Load, process and read back; the workers are stopped whatever happens."""
        c, tell = self.config, progress or Progress()
        ensure_app_topics(TopicAdmin(self.settings), self.app, c.partitions)
        batches = event_batches(self.shop, c.batch_size)
        report = RunReport(self.app.name, c, len(self.shop.events), len(batches))
        loader = ShopLoader(self.settings, self.app, c.partitions)
        catalogue = loader.load_catalogue(self.shop)
        services = self.workers()

        def alive() -> bool:
            return all(s.supervisor.live_pid() is not None for s in services)

        def told(done: list[dict[str, int]]) -> None:
            tell.committed(min(d.get("events", 0) for d in done))

        committed: Callable[[list[dict[str, int]]], None] = told

        watch = CommitWatch(self.settings, AppTopics(self.app.name).commits, c.partitions)
        try:
            for service in services:
                service.start()
            tell.phase("loading the catalogue", None)
            watch.wait(catalogue, c.timeout_s, alive)
            tell.phase("loading event batches", len(batches))
            started = time.monotonic()
            if c.rate is None:
                loader.load_events(batches, tell.loaded)
            else:
                committed = self._paced(loader, batches, c.rate, report, committed)
            # a paced run times each batch by when its notices arrive: poll at a fine grain
            poll_s = 0.05 if c.rate is None else 0.002
            targets = {"events": [len(batches)] * c.partitions}
            watch.wait(targets, c.timeout_s, alive, committed, poll_s=poll_s)
            report.elapsed_s = time.monotonic() - started
            report.restarts = sum(s.restarts() for s in services)
        finally:
            watch.close()
            for service in reversed(services):
                service.stop()
            if self._pacer is not None:
                self._pacer.join()
        report.result = committed_result(
            self.settings, self.app, c.partitions, report.events, tell.reading
        )
        return report
