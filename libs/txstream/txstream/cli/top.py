"""`txstream top`: a live terminal view of every running service, for users without Grafana.

It finds the services the way the native Prometheus does (their registered targets) and
scrapes them itself, so it needs neither Prometheus nor Grafana.
"""

from __future__ import annotations

import contextlib
import math
import time

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from txstream.config import Settings
from txstream.observability import scrape_rates
from txstream.observability.targets import live_targets

console = Console()


def top(
    interval: float = typer.Option(2.0, help="seconds between refreshes"),
    once: bool = typer.Option(False, help="print one view (over one interval) and exit"),
    target: list[str] = typer.Option(
        [], help="host:port of a /metrics endpoint; default: every registered service"
    ),
) -> None:
    """Throughput, latency, lag and aborts per procedure, refreshed every INTERVAL seconds."""
    if interval <= 0:
        console.print(f"[red]error:[/red] --interval must be positive, not {interval}")
        raise typer.Exit(2)
    settings = Settings()

    def addresses() -> list[str]:
        return target or [t.address for t in live_targets(settings)]

    where = addresses()
    if not where:
        console.print(
            "[red]error:[/red] no running service serves metrics "
            f"(none registered in {settings.home}/metrics/targets); start one, or pass --target"
        )
        raise typer.Exit(1)
    before, taken = scrape_rates.scrape(where), time.monotonic()
    if once:
        time.sleep(interval)  # the measuring interval itself, not a wait for a condition
        after = scrape_rates.scrape(where)
        console.print(view(before, after, time.monotonic() - taken, where))
        return
    with Live(console=console, auto_refresh=False) as live, contextlib.suppress(KeyboardInterrupt):
        while True:  # until Ctrl-C
            time.sleep(interval)  # the refresh period
            where = addresses()  # services come and go between refreshes
            after, now = scrape_rates.scrape(where), time.monotonic()
            live.update(view(before, after, now - taken, where), refresh=True)
            before, taken = after, now


def view(
    before: scrape_rates.Samples, after: scrape_rates.Samples, dt: float, where: list[str]
) -> Group:
    apps = Table("app", "batches/s", "batches", "input lag", title="dataflows")
    for a in scrape_rates.apps(before, after, dt):
        apps.add_row(a.app, f"{a.batches_per_s:,.1f}", f"{a.batches_total:,.0f}", f"{a.lag:,.0f}")
    procs = Table(
        "app", "procedure", "TEs/s", "p50", "p99", "aborts/s", "aborts", "top reason",
        title="procedures and transactions",
    )  # fmt: skip
    for p in scrape_rates.procedures(before, after, dt):
        procs.add_row(
            p.app, p.procedure, f"{p.per_s:,.1f}", _ms(p.p50_s), _ms(p.p99_s),
            f"{p.aborts_per_s:,.1f}", f"{p.aborts_total:,.0f}", p.top_reason,
        )  # fmt: skip
    parts: list[Table | str] = [apps, procs]
    outcomes = scrape_rates.totals(after, "txstream_coordinator_outcomes_total", "outcome")
    if outcomes:
        per_s = scrape_rates.rates(
            before, after, dt, "txstream_coordinator_outcomes_total", "outcome"
        )
        coord = Table("outcome", "per s", "total", title="coordinator")
        for outcome, total in outcomes.items():
            coord.add_row(outcome, f"{per_s.get(outcome, 0.0):,.1f}", f"{total:,.0f}")
        parts.append(coord)
    direct = scrape_rates.totals(after, "txstream_direct_total", "status")
    if direct:
        per_s = scrape_rates.rates(before, after, dt, "txstream_direct_total", "status")
        engines = Table("outcome", "per s", "total", title="direct transactions (engines)")
        for status, total in direct.items():
            engines.add_row(f"direct_{status}", f"{per_s.get(status, 0.0):,.1f}", f"{total:,.0f}")
        parts.append(engines)
    dead = scrape_rates.totals(after, "txstream_sequencer_dead_letters_total", "reason")
    if dead:
        parts.append("dead-lettered: " + ", ".join(f"{r} {n:,.0f}" for r, n in dead.items()))
    parts.append(f"[dim]{len(where)} targets, {dt:.1f}s interval[/dim]")
    return Group(*parts)


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:,.2f} ms"
