"""The web console in a real headless browser (Debian's chromium, driven by Playwright) over
real services: the Leaderboard's worker and a coordinator serving HTTP on the real broker, and
a real Prometheus scraping them.

The page must show, from the live system: the dataflow graph (an image that loaded), each
procedure's TEs/s and latency, the coordinator serving with no 2PC transaction open, the
undecodable record sent to the votes stream as a dead letter with its reason, and the
leaderboard (the contestants table by votes, descending) equal to the committed state.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Page, expect, sync_playwright

from leaderboard.commits import committed_tables, wait_for_batches
from leaderboard.dataflow import Params
from leaderboard.loader import Loader
from leaderboard.votegen import write_votes_file
from leaderboard.votes_file import VoteBatch, iter_batches
from tests.integration.test_dashboards import all_alive
from tests.support.kafka_env import free_port
from tests.support.leaderboard_driver import new_app
from tests.support.panels import addresses, wait_until_scraped, wait_until_serving
from tests.support.service_process import ServiceProcess
from txstream.config import Settings
from txstream.kafka.clients import idempotent_producer_config, send
from txstream.kafka.topics import AppTopics
from txstream.model.app import App
from txstream.schemas.codec import BatchCodec
from txstream.schemas.registry import SchemaRegistry
from txstream.stack.prometheus import PrometheusServer
from txstream.state.codec import StateCodec

pytestmark = [pytest.mark.kafka, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"  # Debian's package (make setup installs it)
PARAMS = Params(contestants=12, threshold=150, window=20, slide=2)
VOTES = 600
WAIT_MS = 60_000


@pytest.fixture
def settings(scraped: Settings) -> Settings:
    return scraped


@pytest.fixture
def page() -> Iterator[Page]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def send_votes(settings: Settings, app: App, batches: list[VoteBatch], extra: bytes = b"") -> None:
    """Vote batches onto the votes stream as any producer would, and `extra` after them."""
    codec = BatchCodec(SchemaRegistry(settings.schema_dir).get("leaderboard.Vote"))
    topic = AppTopics(app.name).stream("votes")
    producer = Producer(idempotent_producer_config(settings))
    for b in batches:
        tuples = [dataclasses.asdict(v) for v in b.votes]
        send(producer, topic, codec.encode("votes", b.batch_id, tuples))
    if extra:
        send(producer, topic, extra)
    assert producer.flush(60) == 0


def test_the_console_shows_the_live_system(
    settings: Settings, prometheus: PrometheusServer, page: Page, tmp_path: Path
) -> None:
    app = new_app(PARAMS)
    Loader(settings, app).load_reference_data()
    params = json.dumps({**asdict(PARAMS), "name": app.name})
    spec = ["--app", "leaderboard.dataflow:from_params", "--params", params]
    http_port = free_port()
    started = [
        ServiceProcess(settings, ["worker", "run", *spec], tmp_path / "worker.log"),
        ServiceProcess(
            settings,
            ["coordinator", "run", *spec, "--http-port", str(http_port)],
            tmp_path / "coordinator.log",
        ),
    ]
    try:
        wait_until_serving(settings, prometheus, {"worker": 1, "coordinator": 1})
        votes = tmp_path / "votes.txt"
        write_votes_file(votes, VOTES, PARAMS.contestants, seed=5)
        batches = list(iter_batches(votes, 1))
        half = len(batches) // 2
        topics = AppTopics(app.name)
        # Two halves with a scrape between, so the rate of each procedure's TEs over the
        # last minute has two samples that differ.
        send_votes(settings, app, batches[:half])
        wait_for_batches(settings, topics.commits, {"votes": half}, 120, lambda: True)
        wait_until_scraped(prometheus, addresses(settings), after=time.time(), samples=2)
        send_votes(settings, app, batches[half:], extra=b"\x00not a batch")
        last = batches[-1].batch_id
        wait_for_batches(settings, topics.commits, {"votes": last}, 120, lambda: all_alive(started))
        wait_until_scraped(prometheus, addresses(settings), after=time.time())
        board = leaderboard(settings, app)

        url = f"http://127.0.0.1:{http_port}/console?table=contestants&sort=num_votes&order=desc"
        page.goto(url)
        check_page(page, app, board)
    finally:
        for proc in started:
            proc.kill()


def leaderboard(settings: Settings, app: App) -> list[tuple[int, int]]:
    """(contestant, votes) of the committed contestants table, most votes first."""
    codec = StateCodec(app.dataflow(), SchemaRegistry(settings.schema_dir))
    rows = committed_tables(settings, codec, AppTopics(app.name).changelog)["contestants"]
    board = [(int(r["contestant_number"]), int(r["num_votes"])) for r in rows.values()]
    return sorted(board, key=lambda cv: -cv[1])


def check_page(page: Page, app: App, board: list[tuple[int, int]]) -> None:
    expect(page.locator("#app-name")).to_have_text(app.name, timeout=WAIT_MS)
    expect(page.locator("#serving")).to_have_text("serving", timeout=WAIT_MS)
    page.wait_for_function("document.getElementById('graph').naturalWidth > 0", timeout=WAIT_MS)
    for procedure in ("validate", "maintain_leaderboard"):
        row = page.locator(f'#procedures tr[data-procedure="{procedure}"]')
        expect(row).to_have_count(1, timeout=WAIT_MS)
        rate = float(row.locator("td").nth(1).inner_text())
        assert rate > 0, f"{procedure}: {rate} TEs/s"
    expect(page.locator("#open-count")).to_have_text("(0)")
    expect(page.locator("#transactions tbody")).to_contain_text("none open")
    dead = page.locator("#dead-letters tbody tr")
    expect(dead.first).to_contain_text("undecodable", timeout=WAIT_MS)
    expect(dead.first).to_contain_text("votes")
    rows = page.locator("#table-rows tbody tr")
    expect(rows).to_have_count(len(board), timeout=WAIT_MS)
    header = page.locator("#table-rows thead th").all_inner_texts()
    number, votes = header.index("contestant_number"), header.index("num_votes")
    shown = [
        (int(cells[number]), int(cells[votes]))
        for cells in (r.locator("td").all_inner_texts() for r in rows.all())
    ]
    assert [v for _, v in shown] == [v for _, v in board]  # most votes first
    assert sorted(shown) == sorted(board)
    for error in page.locator(".error").all():
        assert error.is_hidden(), error.inner_text()
    # and it stays live: the page polls again
    page.wait_for_function("Number(document.body.dataset.refreshed) >= 2", timeout=WAIT_MS)
