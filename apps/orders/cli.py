"""`txstream orders run`: the order pipeline end to end on the real stack (workload spec)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from orders.commits import CommitWatch
from orders.dataflow import build_app
from orders.files import InputError, Shop
from orders.loader import ShopLoader, event_batches
from orders.results import committed_result
from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.topics import AppTopics, ensure_app_topics
from txstream.stack.stack import Stack
from txstream.stack.supervisor import Policy, Supervised

app = typer.Typer(help="The order pipeline: orders, restocks and top-ups across partitions.")
console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def run(
    items: Path = typer.Option(..., help="items file: 'item_id price initial_stock'"),
    customers: Path = typer.Option(..., help="customers file: 'customer_id initial_balance'"),
    events: Path = typer.Option(
        ..., help="events file: 'O order customer item qty', 'R item qty', 'T customer amount'"
    ),
    result: Path = typer.Option(..., help="where to write the result document (JSON)"),
    batch_size: int = typer.Option(1, help="K: events per atomic batch"),
    partitions: int = typer.Option(4, help="P: partitions of every stage's topic"),
    workers: int = typer.Option(1, help="W: worker processes"),
    timeout_s: float = typer.Option(3600, help="give up after this many seconds"),
) -> None:
    """Run the workload and write the result document read back from committed state."""
    for name, value in (("--batch-size", batch_size), ("--partitions", partitions),
                        ("--workers", workers)):  # fmt: skip
        if value < 1:
            raise _fail(f"{name} must be at least 1, got {value}")
    try:
        shop = Shop.read(items, customers, events)
    except InputError as e:
        raise _fail(f"{e}; nothing was loaded") from e
    # SIGTERM unwinds like Ctrl-C, so the workers this run started are stopped.
    signal.signal(signal.SIGTERM, lambda signo, frame: sys.exit(128 + signo))
    settings = Settings()
    Stack(settings).up_kafka(console.print)
    shop_app = build_app(f"orders-{uuid.uuid4().hex[:10]}")
    ensure_app_topics(TopicAdmin(settings), shop_app, partitions)
    batches = event_batches(shop, batch_size)
    loader = ShopLoader(settings, shop_app, partitions)
    catalogue = loader.load_catalogue(shop)
    params = json.dumps({"name": shop_app.name})
    txstream = str(Path(sys.executable).with_name("txstream"))
    policy = Policy(max_restarts=100, window_s=60.0, backoff_ms=100, backoff_max_ms=1000)
    worker = [txstream, "worker", "run", "--app", "orders.dataflow:from_params", "--params", params]
    services = [
        Supervised(f"worker-{i}", [*worker, "--instance-id", str(i)], settings, policy=policy)
        for i in range(workers)
    ]

    def alive() -> bool:
        return all(s.supervisor.live_pid() is not None for s in services)

    watch = CommitWatch(settings, AppTopics(shop_app.name).commits, partitions)
    total = len(batches)
    try:
        for service in services:
            service.start()
        with Progress(console=console, transient=True) as bar:
            loading = bar.add_task("loading the catalogue", total=None)
            watch.wait(catalogue, timeout_s, alive)
            bar.update(loading, description="loading event batches", total=total)
            committing = bar.add_task("committed event batches", total=total)
            started = time.monotonic()
            loader.load_events(batches, lambda n: bar.update(loading, completed=n))

            def committed(done: list[dict[str, int]]) -> None:
                bar.update(committing, completed=min(d.get("events", 0) for d in done))

            watch.wait({"events": [total] * partitions}, timeout_s, alive, committed)
            elapsed = time.monotonic() - started
        restarts = sum(s.restarts() for s in services)
    finally:
        watch.close()
        for service in reversed(services):
            service.stop()
    doc = committed_result(settings, shop_app, partitions, len(shop.events)).to_json()
    doc["app"] = shop_app.name
    tmp = result.with_name(result.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, result)
    count = len(shop.events)
    rate = count / elapsed if elapsed > 0 else 0.0
    print(
        f"{count} events ({total} batches of up to {batch_size}) in {elapsed:.2f}s = "
        f"{rate:,.0f} events/s on {partitions} partitions, {workers} workers "
        f"(worker restarts: {restarts}); result in {result}"
    )
